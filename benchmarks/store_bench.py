"""Store micro-benchmark: throughput and latency of single store operations on each backend.

Measures, one call at a time on one event loop (so latency is the cost of the call itself):
    enqueue          enqueue_rollout
    dequeue          dequeue_rollout (claims the head of the queue and creates its attempt)
    enqueue+dequeue  one enqueue followed by one dequeue (a full queue cycle)
    add_span         add_span of one span
    add_many_spans   add_many_spans of `--batch-size` spans; ops/s counts spans, latency is per batch
    query_spans      query_spans of one rollout holding `--batch-size` spans
and with `--concurrency` callers in flight (concurrent writers; SQLite groups them into shared commits):
    add_span xC          add_span of one span
    enqueue+dequeue xC   one enqueue followed by one dequeue

Run:
    python benchmarks/store_bench.py --quick                     # all backends, under a minute
    python benchmarks/store_bench.py --backends memory,sqlite -n 5000
    python benchmarks/store_bench.py --backends postgres --dsn postgresql://postgres@127.0.0.1:5432/test
    python benchmarks/store_bench.py --backends sqlite --concurrency 32 --json sqlite.json

Prints a table of ops/s, p50 and p99 latency per backend and operation. PostgreSQL runs in a fresh
schema that is dropped afterwards; SQLite in a temporary file. Numbers depend on the machine; this
is a tool for comparing backends and changes, never a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from agentlightning.store import LightningStore
from agentlightning.types import AttemptedRollout, Span

DEFAULT_DSN = os.environ.get("AGL_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ("memory", "sqlite", "postgres")


@dataclass
class Measurement:
    backend: str
    operation: str
    calls: int
    items: int
    seconds: float
    latencies: list[float]

    @property
    def ops_per_second(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else float("inf")

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
        return ordered[index]


@contextlib.asynccontextmanager
async def open_backend(name: str, dsn: str) -> AsyncIterator[LightningStore]:
    if name == "memory":
        from agentlightning.store.memory import InMemoryLightningStore

        memory = InMemoryLightningStore()
        yield memory
        await memory.close()
    elif name == "sqlite":
        from agentlightning.store.sqlite import SqliteLightningStore

        with tempfile.TemporaryDirectory(prefix="agl-bench-") as directory:
            sqlite = SqliteLightningStore(os.path.join(directory, "bench.db"))
            try:
                yield sqlite
            finally:
                await sqlite.close()
    elif name == "postgres":
        from agentlightning.store.postgres import PostgresLightningStore

        postgres = PostgresLightningStore(dsn, schema=f"agl_bench_{uuid.uuid4().hex[:10]}")
        try:
            yield postgres
        finally:
            await postgres.drop_schema()
            await postgres.close()
    else:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")


def make_spans(rollout: AttemptedRollout, first_sequence_id: int, count: int) -> list[Span]:
    return [
        Span.from_attributes(
            rollout_id=rollout.rollout_id,
            attempt_id=rollout.attempt.attempt_id,
            sequence_id=first_sequence_id + i,
            name="bench.llm_call",
            attributes={"gen_ai.prompt": "x" * 64, "gen_ai.completion": "y" * 64, "index": first_sequence_id + i},
            start_time=time.time(),
            end_time=time.time(),
        )
        for i in range(count)
    ]


async def timed(
    backend: str, operation: str, calls: int, call: Callable[[int], Awaitable[Any]], items_per_call: int = 1
) -> Measurement:
    latencies: list[float] = []
    started = time.perf_counter()
    for index in range(calls):
        before = time.perf_counter()
        await call(index)
        latencies.append(time.perf_counter() - before)
    return Measurement(backend, operation, calls, calls * items_per_call, time.perf_counter() - started, latencies)


async def timed_concurrently(
    backend: str, operation: str, calls: int, concurrency: int, call: Callable[[int], Awaitable[Any]]
) -> Measurement:
    """`calls` calls with `concurrency` callers in flight; latency is per call, queueing included."""
    latencies: list[float] = []
    next_index = iter(range(calls))

    async def caller() -> None:
        for index in next_index:
            before = time.perf_counter()
            await call(index)
            latencies.append(time.perf_counter() - before)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return Measurement(backend, operation, calls, calls, time.perf_counter() - started, latencies)


async def bench_backend(
    name: str, *, n: int, batches: int, batch_size: int, dsn: str, concurrency: int = 0
) -> list[Measurement]:
    results: list[Measurement] = []
    async with open_backend(name, dsn) as store:
        await store.statistics()  # connect and create tables outside the measurements

        async def enqueue(i: int) -> None:
            await store.enqueue_rollout(input={"index": i})

        results.append(await timed(name, "enqueue", n, enqueue))

        claimed: list[AttemptedRollout] = []

        async def dequeue(i: int) -> None:
            rollout = await store.dequeue_rollout(worker_id="bench-worker")
            assert rollout is not None, "queue ran dry during the dequeue benchmark"
            claimed.append(rollout)

        results.append(await timed(name, "dequeue", n, dequeue))

        async def cycle(i: int) -> None:
            await store.enqueue_rollout(input={"index": i})
            assert await store.dequeue_rollout(worker_id="bench-worker") is not None

        results.append(await timed(name, "enqueue+dequeue", n, cycle))

        # Spans go to many rollouts, a few hundred per rollout, like real agents.
        per_rollout = 200
        targets = claimed[: max(1, n // per_rollout + 1)]
        next_sequence: dict[str, int] = {r.rollout_id: 1 for r in targets}

        async def add_span(i: int) -> None:
            rollout = targets[i // per_rollout]
            sequence_id = next_sequence[rollout.rollout_id]
            next_sequence[rollout.rollout_id] += 1
            await store.add_span(make_spans(rollout, sequence_id, 1)[0])

        results.append(await timed(name, "add_span", n, add_span))

        batch_targets = claimed[len(targets) : len(targets) + batches]
        prepared = [make_spans(rollout, 1, batch_size) for rollout in batch_targets]

        async def add_many(i: int) -> None:
            await store.add_many_spans(prepared[i])

        results.append(await timed(name, "add_many_spans", len(prepared), add_many, batch_size))

        async def query(i: int) -> None:
            page = await store.query_spans(batch_targets[i % len(batch_targets)].rollout_id)
            assert len(page) == batch_size

        results.append(await timed(name, "query_spans", max(10, n // 10), query))

        if concurrency > 1:
            add_span_target = claimed[-1]
            sequence_ids = iter(range(1, n + 1))

            async def add_span_concurrently(i: int) -> None:
                await store.add_span(make_spans(add_span_target, next(sequence_ids), 1)[0])

            results.append(
                await timed_concurrently(name, f"add_span x{concurrency}", n, concurrency, add_span_concurrently)
            )

            async def cycle_concurrently(i: int) -> None:
                await store.enqueue_rollout(input={"index": i})
                await store.dequeue_rollout(worker_id=f"bench-worker-{i % concurrency}")

            results.append(
                await timed_concurrently(name, f"enqueue+dequeue x{concurrency}", n, concurrency, cycle_concurrently)
            )
    return results


def render(results: list[Measurement], console: Console) -> None:
    table = Table(title="LightningStore micro-benchmark (one call at a time)")
    table.add_column("backend")
    table.add_column("operation")
    table.add_column("calls", justify="right")
    table.add_column("ops/s", justify="right")
    table.add_column("p50 ms", justify="right")
    table.add_column("p99 ms", justify="right")
    for m in results:
        unit = " spans" if m.items != m.calls else ""
        table.add_row(
            m.backend,
            m.operation,
            str(m.calls),
            f"{m.ops_per_second:,.0f}{unit}",
            f"{m.percentile(0.50) * 1000:.3f}",
            f"{m.percentile(0.99) * 1000:.3f}",
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: memory,sqlite,postgres")
    parser.add_argument("--quick", action="store_true", help="small counts; all backends finish in under a minute")
    parser.add_argument("-n", type=int, default=None, help="calls per single-item operation (default 5000)")
    parser.add_argument("--batches", type=int, default=None, help="add_many_spans calls (default 50)")
    parser.add_argument("--batch-size", type=int, default=100, help="spans per add_many_spans call")
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="PostgreSQL DSN for the postgres backend")
    parser.add_argument(
        "--concurrency", type=int, default=32, help="callers in flight for the concurrent operations (<= 1: skip them)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()

    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in names:
        if b not in BACKENDS:
            parser.error(f"unknown backend {b!r}; choose from {', '.join(BACKENDS)}")
    n = args.n if args.n is not None else (1000 if args.quick else 5000)
    batches = args.batches if args.batches is not None else (20 if args.quick else 50)
    if n < 1 or batches < 1 or args.batch_size < 1:
        parser.error("-n, --batches and --batch-size must be positive")

    console = Console()
    results: list[Measurement] = []
    for name in names:
        started = time.perf_counter()
        results.extend(
            asyncio.run(
                bench_backend(
                    name, n=n, batches=batches, batch_size=args.batch_size, dsn=args.dsn, concurrency=args.concurrency
                )
            )
        )
        console.print(f"[dim]{name}: {time.perf_counter() - started:.1f} s[/dim]")
    render(results, console)
    load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    console.print(
        f"[dim]{n} calls per single-item operation; {batches} batches of {args.batch_size} spans; {load}[/dim]"
    )
    if args.json:
        rows = [
            {
                "backend": m.backend,
                "operation": m.operation,
                "calls": m.calls,
                "ops_per_second": m.ops_per_second,
                "p50_ms": m.percentile(0.50) * 1000,
                "p99_ms": m.percentile(0.99) * 1000,
            }
            for m in results
        ]
        with open(args.json, "w") as handle:
            json.dump({"load": load, "results": rows}, handle, indent=2)


if __name__ == "__main__":
    main()
