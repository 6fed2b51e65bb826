"""LLM proxy overhead: latency the proxy adds per chat completion, compared with calling the backend directly.

The backend is the loopback OpenAI-compatible test server (toy tokenizer, token ids, instant answers) in
its own process, so the measured time is almost all HTTP and proxy work. For each request kind (unary and
streamed) the benchmark alternates a direct call and a proxied call, sequentially, and reports p50/p99
of each and the difference. Proxied calls go through a rollout route, so each one is recorded as a span
in the store before the response completes (the default `wait_for_store` behaviour). In `mp` mode the
CPU time the proxy process spends per request is reported too: unlike latency percentiles, it hardly
depends on what else the machine is running.

Run from the repository root:
    python benchmarks/proxy_bench.py                        # 300 requests per kind, proxy in its own process
    python benchmarks/proxy_bench.py --launch-mode thread   # proxy in a thread of this process
    python benchmarks/proxy_bench.py -n 1000 --unrouted     # also measure calls without a rollout route
    python benchmarks/proxy_bench.py --no-wait-for-store    # record spans after answering (no store round trip)
    python benchmarks/proxy_bench.py --translated           # also /v1/responses and /v1/messages (vs direct chat)
    python benchmarks/proxy_bench.py -n 100 --json proxy.json  # also write the rows as JSON

Numbers depend on the machine (and on other load); this is a tool for comparing changes, never a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentlightning.llm_proxy import LLMProxy  # noqa: E402
from agentlightning.llm_proxy.callbacks import LightningOpenTelemetry  # noqa: E402
from agentlightning.store.memory import InMemoryLightningStore  # noqa: E402
from agentlightning.web.launcher import pick_free_port  # noqa: E402

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant that answers briefly."},
    {"role": "user", "content": "What is the capital of France? Answer with one word and then explain why."},
]


def proxy_process(exclude: set[int]) -> Optional[psutil.Process]:
    """The proxy's serving process (a child of this one in `mp` mode), if any."""
    children = [c for c in psutil.Process().children() if c.pid not in exclude]
    return children[0] if len(children) == 1 else None


def cpu_seconds(process: Optional[psutil.Process]) -> float:
    if process is None:
        return 0.0
    times = process.cpu_times()
    return times.user + times.system


@dataclass
class Series:
    name: str
    seconds: list[float]

    def pct(self, q: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000.0

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.seconds) * 1000.0


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


def request_body(api: str, model: str) -> dict[str, Any]:
    """The same question in the client API's format (`chat`, `responses` or Anthropic `messages`)."""
    system, user = MESSAGES[0]["content"], MESSAGES[1]["content"]  # the direct call gets the chat equivalent
    if api == "responses":
        return {"model": model, "instructions": system, "input": user, "max_output_tokens": 32}
    if api == "messages":
        return {"model": model, "system": system, "messages": [MESSAGES[1]], "max_tokens": 32}
    return {"model": model, "messages": MESSAGES, "max_tokens": 32}


def one_call(client: httpx.Client, url: str, model: str, stream: bool, api: str = "chat") -> float:
    body = request_body(api, model)
    if stream:
        body["stream"] = True
    payload = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    started = time.perf_counter()
    if stream:
        with client.stream("POST", url, content=payload, headers=headers) as response:
            response.raise_for_status()
            for _ in response.iter_bytes():
                pass
    else:
        response = client.post(url, content=payload, headers=headers)
        response.raise_for_status()
    return time.perf_counter() - started


def measure(
    n: int, warmup: int, direct: Callable[[], float], proxied: Callable[[], float]
) -> tuple[list[float], list[float]]:
    for _ in range(warmup):
        direct()
        proxied()
    direct_s: list[float] = []
    proxied_s: list[float] = []
    for i in range(n):
        # Alternate the order so slow drifts of the machine affect both series alike.
        if i % 2:
            direct_s.append(direct())
            proxied_s.append(proxied())
        else:
            proxied_s.append(proxied())
            direct_s.append(direct())
    return direct_s, proxied_s


async def make_store(launch_mode: str) -> tuple[Any, Optional[Any]]:
    """(store the proxy writes to, server to stop afterwards)."""
    if launch_mode != "mp":
        return InMemoryLightningStore(thread_safe=True), None
    from agentlightning.store_http.server import LightningStoreServer

    server = LightningStoreServer(InMemoryLightningStore(thread_safe=True), port=0, launch_mode="thread")
    await server.start()
    return server, server


async def run(args: argparse.Namespace) -> None:
    backend_port = pick_free_port()
    backend = start_backend(backend_port)
    store, store_server = await make_store(args.launch_mode)
    proxy = LLMProxy(
        model_list=[
            {
                "model_name": "policy",
                "litellm_params": {
                    "model": "hosted_vllm/test-model",
                    "api_base": f"http://127.0.0.1:{backend_port}/v1",
                },
            }
        ],
        store=store,
        launch_mode=args.launch_mode,
        callbacks=["return_token_ids", LightningOpenTelemetry(wait_for_store=args.wait_for_store)],
    )
    try:
        await proxy.start()
        rollout = await store.start_rollout(input={"bench": True})
        routed = proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id).endpoint
        direct_url = f"http://127.0.0.1:{backend_port}/v1/chat/completions"
        targets = [("routed", f"{routed}/chat/completions", "chat")]
        if args.unrouted:
            targets.append(("unrouted", f"{proxy.endpoint}/v1/chat/completions", "chat"))
        if args.translated:
            targets += [(api, f"{routed}/{api}", api) for api in ("responses", "messages")]
        rows: list[tuple[str, Series, Series, Optional[float]]] = []
        served_by = proxy_process({backend.pid})
        # TCP_NODELAY: without it the sync client's separate header/body writes meet delayed ACKs (+40 ms).
        transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        with httpx.Client(timeout=30.0, transport=transport) as client:
            for label, proxy_url, api in targets:
                for stream in (False, True):
                    kind = "stream" if stream else "unary"
                    cpu_before = cpu_seconds(served_by)
                    direct_s, proxied_s = await asyncio.to_thread(
                        measure,
                        args.n,
                        args.warmup,
                        lambda s=stream: one_call(client, direct_url, "test-model", s),
                        lambda s=stream, u=proxy_url, a=api: one_call(client, u, "policy", s, a),
                    )
                    cpu = (cpu_seconds(served_by) - cpu_before) / (args.n + args.warmup) if served_by else None
                    rows.append((f"{kind} ({label})", Series("direct", direct_s), Series("proxy", proxied_s), cpu))
        await proxy.stop()  # flushes spans written after answering (--no-wait-for-store)
        spans = await store.query_spans(rollout.rollout_id)
        print(
            f"\nLLM proxy overhead: {args.n} sequential requests per row, proxy launch mode {args.launch_mode!r}, "
            f"wait_for_store={args.wait_for_store}"
        )
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; spans recorded in the store: {len(spans)}\n")
        header = (
            f"{'request':<20} {'direct p50':>10} {'direct p99':>10} {'proxy p50':>10} {'proxy p99':>10} "
            f"{'added p50':>10} {'added p99':>10} {'proxy CPU/req':>14}"
        )
        print(header)
        print("-" * len(header))
        for name, direct, proxied, cpu in rows:
            cpu_text = f"{cpu * 1000:>12.2f}ms" if cpu is not None else f"{'n/a':>14}"
            print(
                f"{name:<20} {direct.pct(0.5):>9.2f}ms {direct.pct(0.99):>9.2f}ms {proxied.pct(0.5):>9.2f}ms "
                f"{proxied.pct(0.99):>9.2f}ms {proxied.pct(0.5) - direct.pct(0.5):>9.2f}ms "
                f"{proxied.pct(0.99) - direct.pct(0.99):>9.2f}ms {cpu_text}"
            )
        if args.json:
            report = {
                "load": "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
                "launch_mode": args.launch_mode,
                "wait_for_store": args.wait_for_store,
                "requests_per_row": args.n,
                "results": [
                    {
                        "request": name,
                        "direct_p50_ms": direct.pct(0.5),
                        "direct_p99_ms": direct.pct(0.99),
                        "proxy_p50_ms": proxied.pct(0.5),
                        "proxy_p99_ms": proxied.pct(0.99),
                        "added_p50_ms": proxied.pct(0.5) - direct.pct(0.5),
                        "added_p99_ms": proxied.pct(0.99) - direct.pct(0.99),
                        "proxy_cpu_ms_per_request": cpu * 1000 if cpu is not None else None,
                    }
                    for name, direct, proxied, cpu in rows
                ],
            }
            with open(args.json, "w") as handle:
                json.dump(report, handle, indent=2)
    finally:
        await proxy.stop()
        if store_server is not None:
            await store_server.stop()
        backend.terminate()
        backend.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=300, help="measured requests per row (default 300)")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured requests first (default 20)")
    parser.add_argument("--launch-mode", choices=("mp", "thread"), default="mp", help="how the proxy runs")
    parser.add_argument("--unrouted", action="store_true", help="also measure calls outside any rollout")
    parser.add_argument(
        "--translated", action="store_true", help="also measure /v1/responses and /v1/messages (translated to chat)"
    )
    parser.add_argument(
        "--no-wait-for-store",
        dest="wait_for_store",
        action="store_false",
        help="write spans after answering instead of before the response completes",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
