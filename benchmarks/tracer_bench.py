"""Tracer hot-path benchmark: spans/s from agent code into an in-memory store through OtelTracer.

Each workload opens one `trace_context` for a rollout, creates `-n` spans, and exits the context
(which flushes every pending span); the time covers creation, delivery, sequence-id allocation,
conversion and storage, and the benchmark verifies that every span reached the store.
    create_span           tracer.create_span with two attributes (instant spans, what emitters use)
    otel_span             start_as_current_span / end from the OpenTelemetry API (what instrumentations do)
    create_span_threaded  as create_span, into a thread-safe store (spans delivered by the delivery thread)
    emit_reward           agentlightning.emit_reward

Run:
    python benchmarks/tracer_bench.py            # 20000 spans per workload
    python benchmarks/tracer_bench.py -n 5000 --repeat 3

Spans per CPU-second (this process's CPU time) is less sensitive to other load on the machine than the
wall-clock rate. Numbers depend on the machine; never a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable

from opentelemetry import trace as trace_api

from agentlightning.emitter import emit_reward
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer


def _workloads(tracer: OtelTracer) -> dict[str, Callable[[int], object]]:
    otel = trace_api.get_tracer("benchmark")

    def create_span(i: int) -> None:
        tracer.create_span("bench.span", {"index": i, "kind": "bench"})

    def otel_span(i: int) -> None:
        with otel.start_as_current_span("bench.otel") as span:
            span.set_attribute("index", i)

    return {
        "create_span": create_span,
        "otel_span": otel_span,
        "create_span_threaded": create_span,
        "emit_reward": lambda i: emit_reward(float(i % 2)),
    }


async def _run(name: str, n: int) -> tuple[float, float]:
    """(spans per wall-clock second, spans per CPU second of this process)."""
    store = InMemoryLightningStore(thread_safe=name.endswith("_threaded"))
    tracer = OtelTracer(instrument_openai=False)
    tracer.init_worker(0, store)
    work = _workloads(tracer)[name]
    attempted = await store.start_rollout(input="bench")
    start, cpu_start = time.perf_counter(), time.process_time()
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        for i in range(n):
            work(i)
            if i % 256 == 0:
                await asyncio.sleep(0)  # like an async agent awaiting I/O now and then
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    stored = await store.query_spans(attempted.rollout_id)
    tracer.teardown_worker(0)
    if len(stored) != n:
        raise RuntimeError(f"{name}: expected {n} stored spans, found {len(stored)}")
    return n / elapsed, n / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=20000, help="spans per workload")
    parser.add_argument("--repeat", type=int, default=3, help="runs per workload (best is reported)")
    args = parser.parse_args()
    names = ["create_span", "otel_span", "create_span_threaded", "emit_reward"]
    print(f"{'workload':<24}{'spans/s (best)':>16}{'spans/s (median)':>18}{'spans/CPU-s (best)':>20}")
    for name in names:
        results = [asyncio.run(_run(name, args.n)) for _ in range(args.repeat)]
        rates = sorted(wall for wall, _ in results)
        cpu_rate = max(cpu for _, cpu in results)
        print(f"{name:<24}{rates[-1]:>16,.0f}{rates[len(rates) // 2]:>18,.0f}{cpu_rate:>20,.0f}")


if __name__ == "__main__":
    main()
