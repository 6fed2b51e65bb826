"""Rollout-flow benchmark: what one rollout's life costs the store, in process and over HTTP.

A flow is the calls a runner and an algorithm make for one rollout, one at a time:
    enqueue_rollout, dequeue_rollout, 5 x add_span, update_attempt(status="succeeded")
Targets:
    memory   InMemoryLightningStore, same event loop
    sqlite   SqliteLightningStore on a temporary file (durable: WAL, each call acknowledged after COMMIT)
    postgres PostgresLightningStore in a fresh schema (only when asked for: needs a server)
    http     LightningStoreClient -> LightningStoreServer over an in-memory store in its own process
Flows/s counts the time spent inside the store calls only: the spans are built (`Span.from_attributes`,
the tracer's work, ~20 us each) between the timed calls. Latency percentiles are per flow. Flows per
CPU-second (this process, all threads) is reported beside flows/s: on a busy machine it is the steadier figure.
So is the cyclic garbage collector's share of the CPU: every span the in-memory store holds is a live Python
object, and a full collection walks all of them, so that share grows with the store.

Run:
    python benchmarks/flow_bench.py --quick                       # memory, sqlite, http; under a minute
    python benchmarks/flow_bench.py --targets memory -n 20000 --profile 30
    python benchmarks/flow_bench.py --targets sqlite,http --json flows.json

`--profile N` runs the in-process targets under cProfile and prints the top N functions by cumulative
time. Numbers depend on the machine and its load (printed with them); never a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import multiprocessing
import os
import pstats
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from agentlightning.store import LightningStore
from agentlightning.types import AttemptedRollout, Span

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_bench import open_backend  # noqa: E402  (a sibling script: one way to open each backend)

TARGETS = ("memory", "sqlite", "postgres", "http")
DEFAULT_TARGETS = ("memory", "sqlite", "http")
DEFAULT_DSN = os.environ.get("AGL_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
SPANS_PER_FLOW = 5


@dataclass
class FlowResult:
    target: str
    flows: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    cpu_seconds: float = 0.0
    gc_seconds: float = 0.0
    loop_cpu_seconds: float = 0.0
    profile: Optional[str] = None

    @property
    def flows_per_second(self) -> float:
        return self.flows / self.seconds if self.seconds > 0 else float("inf")

    @property
    def gc_share(self) -> float:
        """The collector's share of this process's CPU over the measured loop (span building included)."""
        return self.gc_seconds / self.loop_cpu_seconds if self.loop_cpu_seconds > 0 else 0.0

    @property
    def flows_per_cpu_second(self) -> float:
        return self.flows / self.cpu_seconds if self.cpu_seconds > 0 else float("inf")

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "flows": self.flows,
            "flows_per_second": self.flows_per_second,
            "us_per_flow": 1e6 / self.flows_per_second,
            "flows_per_cpu_second": self.flows_per_cpu_second,
            "gc_share_of_cpu": self.gc_share,
            "p50_ms": self.percentile(0.5) * 1000,
            "p99_ms": self.percentile(0.99) * 1000,
        }


def make_span(rollout: AttemptedRollout, sequence_id: int) -> Span:
    return Span.from_attributes(
        rollout_id=rollout.rollout_id,
        attempt_id=rollout.attempt.attempt_id,
        sequence_id=sequence_id,
        name="bench.llm_call",
        attributes={"gen_ai.prompt": "x" * 64, "gen_ai.completion": "y" * 64, "index": sequence_id},
        start_time=1.0,
        end_time=2.0,
    )


async def one_flow(store: LightningStore, index: int) -> tuple[float, float]:
    """Run one flow; returns the wall-clock and CPU seconds (all threads of this process) in store calls."""
    clock, cpu = time.perf_counter, time.process_time
    started, cpu_started = clock(), cpu()
    await store.enqueue_rollout(input={"index": index})
    rollout = await store.dequeue_rollout(worker_id="bench-worker")
    spent, cpu_spent = clock() - started, cpu() - cpu_started
    assert rollout is not None, "the rollout just enqueued was not dequeued"
    for sequence_id in range(1, SPANS_PER_FLOW + 1):
        span = make_span(rollout, sequence_id)
        started, cpu_started = clock(), cpu()
        stored = await store.add_span(span)
        spent, cpu_spent = spent + clock() - started, cpu_spent + cpu() - cpu_started
        assert stored is not None, "a span of a running attempt was not stored"
    started, cpu_started = clock(), cpu()
    await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
    return spent + clock() - started, cpu_spent + cpu() - cpu_started


class _GcClock:
    """CPU seconds this process spends in the cyclic garbage collector while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started


async def run_flows(target: str, store: LightningStore, n: int, warmup: int, profile_lines: int) -> FlowResult:
    for index in range(warmup):
        await one_flow(store, index)
    profiler = cProfile.Profile() if profile_lines > 0 else None
    latencies: list[float] = []
    cpu_seconds = 0.0
    # Every stored span stays a live Python object: full collections walk all of them, so the collector's
    # share grows with the store. Reported beside the figures (it runs inside the timed calls too).
    gc_clock = _GcClock()
    gc.callbacks.append(gc_clock)
    if profiler is not None:
        profiler.enable()
    loop_cpu_started = time.process_time()
    try:
        for index in range(n):
            wall, cpu = await one_flow(store, warmup + index)
            latencies.append(wall)
            cpu_seconds += cpu
    finally:
        loop_cpu = time.process_time() - loop_cpu_started
        if profiler is not None:
            profiler.disable()
        gc.callbacks.remove(gc_clock)
    result = FlowResult(target, n, sum(latencies), latencies, cpu_seconds, gc_clock.seconds, loop_cpu)
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(profile_lines)
        result.profile = out.getvalue()
    stats = await store.statistics()
    expected = n + warmup
    assert stats.get("total_spans", 0) >= SPANS_PER_FLOW * expected, f"{target}: spans went missing: {stats}"
    return result


def _serve_memory(port: int) -> None:
    from agentlightning.store.memory import InMemoryLightningStore
    from agentlightning.store_http.server import LightningStoreServer

    async def serve() -> None:
        server = LightningStoreServer(InMemoryLightningStore(), port=port, launch_mode="asyncio")
        await server.run_forever()

    asyncio.run(serve())


async def _http_flows(port: int, n: int, warmup: int) -> FlowResult:
    from agentlightning.store_http.client import LightningStoreClient

    client = LightningStoreClient(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 60
        while not await client.health():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the store server on port {port} did not come up within 60 s")
            await asyncio.sleep(0.05)
        return await run_flows("http", client, n, warmup, 0)
    finally:
        await client.close()


def bench_http(n: int, warmup: int) -> FlowResult:
    from agentlightning.web.launcher import pick_free_port

    port = pick_free_port()
    server = multiprocessing.get_context("spawn").Process(target=_serve_memory, args=(port,), daemon=True)
    server.start()
    try:
        return asyncio.run(_http_flows(port, n, warmup))
    finally:
        if server.pid is not None:
            os.kill(server.pid, signal.SIGINT)
        server.join(30)
        if server.is_alive():
            server.kill()


async def bench_in_process(target: str, n: int, warmup: int, dsn: str, profile_lines: int) -> FlowResult:
    async with open_backend(target, dsn) as store:
        await store.statistics()  # connect and create tables outside the measurement
        return await run_flows(target, store, n, warmup, profile_lines)


def bench(target: str, n: int, warmup: int, dsn: str = DEFAULT_DSN, profile_lines: int = 0) -> FlowResult:
    if target == "http":
        return bench_http(n, warmup)
    return asyncio.run(bench_in_process(target, n, warmup, dsn, profile_lines))


def load_text() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS), help=f"comma-separated: {','.join(TARGETS)}")
    parser.add_argument("--quick", action="store_true", help="fewer flows: every target in under a minute")
    parser.add_argument("-n", type=int, default=None, help="measured flows per target (default 5000; quick 1000)")
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="PostgreSQL DSN for the postgres target")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile in-process targets, top N")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    for target in targets:
        if target not in TARGETS:
            parser.error(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")
    n = args.n if args.n is not None else (1000 if args.quick else 5000)
    if n < 1:
        parser.error("-n must be positive")
    # Fewer over HTTP and SQLite: each flow there costs milliseconds, not microseconds.
    counts = {t: n if t == "memory" else max(1, n // 4) for t in targets}

    results = [bench(t, counts[t], max(10, counts[t] // 10), args.dsn, args.profile) for t in targets]
    load = load_text()
    print(f"\nRollout flow: enqueue, dequeue, {SPANS_PER_FLOW} x add_span, update_attempt(succeeded); {load}")
    header = f"{'target':<10}{'flows':>8}{'flows/s':>10}{'us/flow':>10}{'p50 ms':>9}{'p99 ms':>9}{'flows/CPU-s':>13}"
    print(header + f"{'GC % CPU':>10}")
    for r in results:
        print(
            f"{r.target:<10}{r.flows:>8}{r.flows_per_second:>10,.0f}{1e6 / r.flows_per_second:>10,.0f}"
            f"{r.percentile(0.5) * 1000:>9.3f}{r.percentile(0.99) * 1000:>9.3f}{r.flows_per_cpu_second:>13,.0f}"
            f"{r.gc_share * 100:>10.0f}"
        )
    print("flows/CPU-s: flows per CPU-second of this process (all threads; the HTTP server's CPU is not counted);")
    print("it hardly depends on what else the machine runs, unlike flows/s. GC % CPU: the cyclic collector's")
    print("share of this process's CPU over the measured loop (a full collection walks every stored span).")
    for r in results:
        if r.profile:
            print(f"\n--- cProfile, {r.target} (top {args.profile} by cumulative time) ---\n{r.profile}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"load": load, "results": [r.as_json() for r in results]}, handle, indent=2)


if __name__ == "__main__":
    main()
