"""Harness gateway overhead: latency `agl gateway` adds per LLM call, unary and streamed.

The backend is the loopback OpenAI-compatible test server (instant answers with token ids) in its own
process. The gateway runs as its own service (`agl gateway` over a SQLite file, the default) or in a
thread of this process (`--launch thread`, SQLite or `--store memory`). Calls go through a rollout-scoped
URL with the attempt's key, so each is checked against the store (cached), shaped (token ids, train
temperature, logprobs) and recorded as a span before the response completes. Direct and gateway calls
alternate, sequentially; the table reports p50/p99 of each and the difference.

Run from the repository root:
    python benchmarks/gateway_bench.py                         # 300 calls per kind, gateway process over SQLite
    python benchmarks/gateway_bench.py --launch thread --store memory -n 500
    python benchmarks/gateway_bench.py --json gateway.json     # also write the numbers as JSON

Numbers depend on the machine and its load (reported with them); a tool for comparing changes, never a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentlightning.gateway import Gateway, GatewayConfig, attempt_key, rollout_urls  # noqa: E402
from agentlightning.store.memory import InMemoryLightningStore  # noqa: E402
from agentlightning.store.sqlite import SqliteLightningStore  # noqa: E402
from agentlightning.web.launcher import pick_free_port  # noqa: E402

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant that answers briefly."},
    {"role": "user", "content": "What is the capital of France? Answer with one word and then explain why."},
]
SECRET = "gateway-bench"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000.0


def start_backend(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.openai_server", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1.0).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"the loopback backend did not start on port {port}")


def start_gateway_process(db: str, upstream: str) -> tuple[subprocess.Popen[str], str]:
    """`agl gateway` over the SQLite file `db`; returns the process and its endpoint."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "agentlightning.cli", "gateway", "--backend", "sqlite", "--path", db]
    command += ["--port", "0", "--secret", SECRET, "--upstream", upstream, "--log-level", "WARNING"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    stdout = process.stdout
    assert stdout is not None
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        if "serving at " in line:
            return process, line.split("serving at ", 1)[1].split()[0]
    process.kill()
    raise RuntimeError("agl gateway did not start")


def one_call(client: httpx.Client, url: str, headers: dict[str, str], stream: bool) -> float:
    body: dict[str, Any] = {"model": "test-model", "messages": MESSAGES, "max_tokens": 32}
    if stream:
        body["stream"] = True
    payload = json.dumps(body).encode()
    started = time.perf_counter()
    if stream:
        with client.stream("POST", url, content=payload, headers=headers) as response:
            response.raise_for_status()
            for _ in response.iter_bytes():
                pass
    else:
        client.post(url, content=payload, headers=headers).raise_for_status()
    return time.perf_counter() - started


def measure(
    n: int, warmup: int, direct: Callable[[], float], gateway: Callable[[], float]
) -> tuple[list[float], list[float]]:
    for _ in range(warmup):
        direct()
        gateway()
    direct_s: list[float] = []
    gateway_s: list[float] = []
    for i in range(n):
        # Alternate the order so slow drifts of the machine affect both series alike.
        if i % 2:
            direct_s.append(direct())
            gateway_s.append(gateway())
        else:
            gateway_s.append(gateway())
            direct_s.append(direct())
    return direct_s, gateway_s


async def run(args: argparse.Namespace) -> dict[str, Any]:
    backend_port = pick_free_port()
    backend = start_backend(backend_port)
    upstream = f"http://127.0.0.1:{backend_port}/v1"
    workdir = tempfile.mkdtemp(prefix="agl-gateway-bench-")
    db = os.path.join(workdir, "bench.db")
    store: Any = InMemoryLightningStore(thread_safe=True) if args.store == "memory" else SqliteLightningStore(db)
    gateway: Optional[Gateway] = None
    service: Optional[subprocess.Popen[str]] = None
    try:
        attempted = await store.start_rollout(input={"bench": True}, mode="train")
        rollout_id, attempt_id = attempted.rollout_id, attempted.attempt.attempt_id
        if args.launch == "process":
            service, endpoint = start_gateway_process(db, upstream)
        else:
            gateway = Gateway(store, GatewayConfig(upstreams=(upstream,)), secret=SECRET)
            await gateway.start()
            endpoint = gateway.endpoint
        base_url, _ = rollout_urls(endpoint, rollout_id, attempt_id, "train")
        headers = {
            "Content-Type": "application/json",
            "Authorization": f"Bearer {attempt_key(SECRET, rollout_id, attempt_id)}",
        }
        direct_headers = {"Content-Type": "application/json"}
        rows: list[dict[str, Any]] = []
        transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        with httpx.Client(timeout=30.0, transport=transport) as client:
            for stream in (False, True):
                direct_s, gateway_s = await asyncio.to_thread(
                    measure,
                    args.n,
                    args.warmup,
                    lambda s=stream: one_call(client, f"{upstream}/chat/completions", direct_headers, s),
                    lambda s=stream: one_call(client, f"{base_url}/chat/completions", headers, s),
                )
                rows.append(
                    {
                        "kind": "stream" if stream else "unary",
                        "direct_p50_ms": pct(direct_s, 0.5),
                        "direct_p99_ms": pct(direct_s, 0.99),
                        "gateway_p50_ms": pct(gateway_s, 0.5),
                        "gateway_p99_ms": pct(gateway_s, 0.99),
                        "added_p50_ms": pct(gateway_s, 0.5) - pct(direct_s, 0.5),
                        "added_p99_ms": pct(gateway_s, 0.99) - pct(direct_s, 0.99),
                        "added_mean_ms": (statistics.fmean(gateway_s) - statistics.fmean(direct_s)) * 1000.0,
                    }
                )
        if service is not None:
            service.terminate()
            service.wait(timeout=30)
            service = None
            await store.close()
            store = SqliteLightningStore(db)
        if gateway is not None:
            await gateway.stop()
            gateway = None
        n_spans = len(await store.query_spans(rollout_id))
    finally:
        if gateway is not None:
            await gateway.stop()
        if service is not None:
            service.kill()
        await store.close()
        backend.terminate()
        backend.wait(timeout=10)
    return {
        "launch": args.launch,
        "store": args.store,
        "n": args.n,
        "warmup": args.warmup,
        "spans_recorded": n_spans,
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "python": sys.version.split()[0],
        "rows": rows,
    }


def print_table(result: dict[str, Any]) -> None:
    print(
        f"\nGateway overhead: {result['n']} sequential calls per row, gateway {result['launch']} over "
        f"{result['store']}; spans recorded: {result['spans_recorded']}"
    )
    load = ", ".join(f"{x:.2f}" for x in result["load_average"])
    print(f"python {result['python']}, {result['cpus']} CPUs, load average {load}\n")
    header = (
        f"{'call':<8} {'direct p50':>10} {'direct p99':>10} {'gateway p50':>11} {'gateway p99':>11} "
        f"{'added p50':>10} {'added p99':>10}"
    )
    print(header)
    print("-" * len(header))
    for row in result["rows"]:
        print(
            f"{row['kind']:<8} {row['direct_p50_ms']:>8.2f}ms {row['direct_p99_ms']:>8.2f}ms "
            f"{row['gateway_p50_ms']:>9.2f}ms {row['gateway_p99_ms']:>9.2f}ms "
            f"{row['added_p50_ms']:>8.2f}ms {row['added_p99_ms']:>8.2f}ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=300, help="measured calls per row (default 300)")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured calls first (default 20)")
    parser.add_argument("--launch", choices=("process", "thread"), default="process", help="how the gateway runs")
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite", help="store (memory: thread only)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args()
    if args.launch == "process" and args.store != "sqlite":
        parser.error("--launch process runs `agl gateway` over a SQLite file; use --store sqlite")
    result = asyncio.run(run(args))
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
