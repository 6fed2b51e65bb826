"""Soak benchmark: N concurrent clients run the rollout flow against `agl store` for T seconds.

Each backend gets a fresh `agl store` process; each client (its own `LightningStoreClient`) loops over the
flow a runner and an algorithm drive together:
    enqueue_rollout -> dequeue_rollout(worker_id) -> add_many_spans(--spans spans of --span-bytes) ->
    update_attempt(succeeded)
and the server's resident memory (RSS) is sampled every second. Reported per backend: flows/s, flow
latency p50/p99, errors, server RSS at start / end / peak and its growth over the second half of the run
(MB per minute: about 0 when memory is flat). The in-memory store runs under `--memory-budget` (span
eviction, `agl store --memory-budget`); pass `--memory-budget none` to see it without one.

Run:
    python benchmarks/soak_bench.py --quick
    python benchmarks/soak_bench.py --backends memory,sqlite --clients 32 --seconds 60 --json soak.json
    python benchmarks/soak_bench.py --backends memory --seconds 300        # the 5-minute soak

Numbers depend on the machine and its load (printed with the results); never a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import aiohttp
import psutil
from rich.console import Console
from rich.table import Table

from agentlightning.store_http.client import LightningStoreClient
from agentlightning.types import AUTO_SEQUENCE_ID, Span
from agentlightning.web.launcher import pick_free_port

BACKENDS = ("memory", "sqlite", "postgres")
DEFAULT_DSN = os.environ.get("AGL_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
MB = 1024 * 1024


@dataclass
class SoakResult:
    backend: str
    clients: int
    seconds: float
    flows: int = 0
    errors: int = 0
    flows_per_second: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    rss_start_mb: float = 0.0
    rss_end_mb: float = 0.0
    rss_peak_mb: float = 0.0
    rss_growth_second_half_mb_per_min: float = 0.0
    span_bytes_held_mb: Optional[float] = None
    memory_budget: Optional[str] = None
    first_error: Optional[str] = None
    rss_samples_mb: list[tuple[float, float]] = field(default_factory=list)


# ---- the server under test ----


@contextmanager
def postgres_schema(dsn: str) -> Iterator[str]:
    """A DSN whose tables live in a fresh schema, dropped afterwards (other users of the database are untouched)."""
    import psycopg
    from psycopg import sql

    schema = f"agl_soak_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    separator = "&" if "?" in dsn else "?"
    try:
        yield f"{dsn}{separator}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def agl_store(backend: str, port: int, workdir: str, dsn: str, memory_budget: Optional[str]) -> Iterator[int]:
    """Run `agl store` for `backend` on `port` until healthy; yields its pid and stops it afterwards."""
    args = [sys.executable, "-m", "agentlightning.cli", "store", "--port", str(port), "--backend", backend]
    args += ["--log-level", "WARNING"]
    if backend == "sqlite":
        args += ["--path", os.path.join(workdir, "soak.db")]
    if backend == "postgres":
        args += ["--dsn", dsn]
    if backend == "memory" and memory_budget:
        args += ["--memory-budget", memory_budget]
    log = open(os.path.join(workdir, f"{backend}-server.log"), "w")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        import httpx

        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"agl store ({backend}) exited with {process.returncode}; see {log.name}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/agl/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"agl store ({backend}) not healthy after 60 s; see {log.name}")
            time.sleep(0.1)
        yield process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


# ---- the load ----


def make_spans(rollout_id: str, attempt_id: str, count: int, payload: str) -> list[Span]:
    return [
        Span.from_attributes(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=AUTO_SEQUENCE_ID,  # the store numbers them
            name=f"llm.call.{k}",
            attributes={"gen_ai.prompt.0.content": payload, "gen_ai.usage.total_tokens": 100 + k},
        )
        for k in range(count)
    ]


async def client_loop(
    endpoint: str, index: int, stop_at: float, spans: int, payload: str, latencies: list[float], result: SoakResult
) -> None:
    client = LightningStoreClient(endpoint, retry_delays=(0.5,), health_retry_delays=(0.2,))
    worker_id = f"soak-{index}"
    try:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            try:
                await client.enqueue_rollout(input={"task": index, "text": payload[:64]})
                claimed = await client.dequeue_rollout(worker_id=worker_id)
                if claimed is None:
                    continue  # another client took it; ours is in the queue for someone else
                await client.add_many_spans(make_spans(claimed.rollout_id, claimed.attempt.attempt_id, spans, payload))
                await client.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")
            except Exception as exc:  # counted, not fatal: a soak reports errors instead of stopping
                result.errors += 1
                result.first_error = result.first_error or f"{type(exc).__name__}: {exc}"[:300]
                await asyncio.sleep(0.05)
                continue
            latencies.append(time.perf_counter() - started)
    finally:
        await client.close()


async def sample_rss(pid: int, started: float, stop_at: float, samples: list[tuple[float, float]]) -> None:
    process = psutil.Process(pid)
    while True:
        samples.append((round(time.monotonic() - started, 2), process.memory_info().rss / MB))
        if time.monotonic() >= stop_at:
            return
        await asyncio.sleep(1.0)


async def span_bytes_held(endpoint: str) -> Optional[float]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{endpoint}/v1/agl/statistics") as response:
            stats: dict[str, Any] = await response.json()
    held = stats.get("total_span_bytes")
    return None if held is None else held / MB


def growth_per_minute(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of RSS over the second half of the run, in MB per minute."""
    half = [s for s in samples if s[0] >= samples[-1][0] / 2]
    if len(half) < 2:
        return 0.0
    xs, ys = [s[0] for s in half], [s[1] for s in half]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    denominator = sum((x - mean_x) ** 2 for x in xs)
    if denominator == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / denominator * 60


async def soak(backend: str, args: argparse.Namespace, workdir: str, dsn: str) -> SoakResult:
    port = pick_free_port()
    endpoint = f"http://127.0.0.1:{port}"
    budget = args.memory_budget if backend == "memory" and args.memory_budget != "none" else None
    result = SoakResult(backend, args.clients, args.seconds, memory_budget=budget)
    payload = "x" * args.span_bytes
    with agl_store(backend, port, workdir, dsn, budget) as pid:
        latencies: list[float] = []
        started = time.monotonic()
        stop_at = started + args.seconds
        sampler = asyncio.create_task(sample_rss(pid, started, stop_at, result.rss_samples_mb))
        await asyncio.gather(
            *(client_loop(endpoint, i, stop_at, args.spans, payload, latencies, result) for i in range(args.clients))
        )
        elapsed = time.monotonic() - started
        await sampler
        if backend == "memory":
            result.span_bytes_held_mb = await span_bytes_held(endpoint)
    latencies.sort()
    result.flows = len(latencies)
    result.flows_per_second = len(latencies) / elapsed
    if latencies:
        result.p50_ms = statistics.median(latencies) * 1e3
        result.p99_ms = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e3
    rss = [s[1] for s in result.rss_samples_mb]
    result.rss_start_mb, result.rss_end_mb, result.rss_peak_mb = rss[0], rss[-1], max(rss)
    result.rss_growth_second_half_mb_per_min = growth_per_minute(result.rss_samples_mb)
    return result


# ---- report ----


def render(results: list[SoakResult], console: Console, load: str) -> None:
    table = Table(title=f"agl store soak: {results[0].clients} clients x {results[0].seconds:.0f} s ({load})")
    for column in ("backend", "flows/s", "p50 ms", "p99 ms", "errors", "RSS start", "RSS end", "RSS peak"):
        table.add_column(column, justify="left" if column == "backend" else "right")
    table.add_column("RSS growth 2nd half", justify="right")
    table.add_column("span MB held", justify="right")
    for r in results:
        name = r.backend + (f" (budget {r.memory_budget})" if r.memory_budget else "")
        table.add_row(
            name,
            f"{r.flows_per_second:,.1f}",
            f"{r.p50_ms:.1f}",
            f"{r.p99_ms:.1f}",
            str(r.errors),
            f"{r.rss_start_mb:.0f} MB",
            f"{r.rss_end_mb:.0f} MB",
            f"{r.rss_peak_mb:.0f} MB",
            f"{r.rss_growth_second_half_mb_per_min:+.1f} MB/min",
            "-" if r.span_bytes_held_mb is None else f"{r.span_bytes_held_mb:.1f}",
        )
    console.print(table)
    for r in results:
        if r.first_error:
            console.print(f"[yellow]{r.backend}: first error: {r.first_error}[/yellow]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: memory,sqlite,postgres")
    parser.add_argument("--clients", type=int, default=None, help="concurrent clients (default 32; --quick 8)")
    parser.add_argument("--seconds", type=float, default=None, help="soak length per backend (default 60; --quick 8)")
    parser.add_argument("--spans", type=int, default=5, help="spans per rollout (default 5)")
    parser.add_argument("--span-bytes", type=int, default=1024, help="payload bytes per span (default 1024)")
    parser.add_argument(
        "--memory-budget", default="64M", help="`agl store --memory-budget` for the memory backend ('none': unset)"
    )
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="PostgreSQL DSN for the postgres backend")
    parser.add_argument("--quick", action="store_true", help="8 clients x 8 s on memory and sqlite")
    parser.add_argument("--json", metavar="PATH", help="also write the results (with RSS samples) as JSON")
    args = parser.parse_args()
    if args.quick:
        args.clients = args.clients or 8
        args.seconds = args.seconds or 8.0
        if args.backends == ",".join(BACKENDS):
            args.backends = "memory,sqlite"
    args.clients = args.clients or 32
    args.seconds = args.seconds or 60.0
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {', '.join(unknown)}; choose from {', '.join(BACKENDS)}")

    console = Console(width=max(Console().width, 150))
    load = "load average {:.2f} {:.2f} {:.2f}, {} CPUs".format(*os.getloadavg(), os.cpu_count())
    results: list[SoakResult] = []
    with tempfile.TemporaryDirectory(prefix="agl-soak-") as workdir:
        for backend in backends:
            console.print(f"soaking {backend}: {args.clients} clients x {args.seconds:.0f} s ...")
            if backend == "postgres":
                with postgres_schema(args.dsn) as dsn:
                    results.append(asyncio.run(soak(backend, args, workdir, dsn)))
            else:
                results.append(asyncio.run(soak(backend, args, workdir, args.dsn)))
    load_after = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    render(results, console, f"{load}; after: {load_after}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {"load_before": load, "load_after": load_after, "results": [asdict(r) for r in results]},
                handle,
                indent=2,
            )
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
