"""Bulk-call benchmark: one store call over N rollouts, at growing N, on each backend.

A call over N rollouts must cost O(N) (or N log N): twice the rollouts, about twice the time. Measures,
for each N in `--sizes`:
    enqueue_many      enqueue_many_rollouts of N requests in one call
    query_by_ids      query_rollouts(rollout_id_in=<the N ids>) in one call
    wait_snapshot     wait_for_rollouts(rollout_ids=<the N ids>, timeout=0) in one call (the poll of a batch)
Each N runs in a fresh store holding `--prefill` rollouts already (queued work of earlier steps).

Run:
    python benchmarks/bulk_bench.py --quick                       # all backends, about a minute
    python benchmarks/bulk_bench.py --backends sqlite --sizes 1000,4000,16000 --json bulk.json

Prints seconds per call and rollouts/s per backend, operation and N, plus the growth factor between
consecutive sizes (seconds ratio / size ratio: about 1 for O(N), about the size ratio for O(N^2)).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Optional

from rich.console import Console
from rich.table import Table

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # this checkout's agentlightning, even beside another install
from store_bench import BACKENDS, DEFAULT_DSN, open_backend  # noqa: E402  (a sibling script)

from agentlightning.types import EnqueueRolloutRequest  # noqa: E402

OPERATIONS = ("enqueue_many", "query_by_ids", "wait_snapshot")


@dataclass
class BulkResult:
    backend: str
    operation: str
    size: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.size / self.seconds if self.seconds > 0 else float("inf")


async def bench_size(backend: str, size: int, prefill: int, dsn: str) -> list[BulkResult]:
    results: list[BulkResult] = []
    async with open_backend(backend, dsn) as store:
        if prefill:
            await store.enqueue_many_rollouts([EnqueueRolloutRequest(input={"prefill": i}) for i in range(prefill)])
        requests = [EnqueueRolloutRequest(input={"index": i}) for i in range(size)]
        started = time.perf_counter()
        rollouts = await store.enqueue_many_rollouts(requests)
        results.append(BulkResult(backend, "enqueue_many", size, time.perf_counter() - started))
        assert len(rollouts) == size
        ids = [r.rollout_id for r in rollouts]

        started = time.perf_counter()
        page = await store.query_rollouts(rollout_id_in=ids)
        results.append(BulkResult(backend, "query_by_ids", size, time.perf_counter() - started))
        assert page.total == size, f"query_rollouts found {page.total} of {size}"

        started = time.perf_counter()
        finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
        results.append(BulkResult(backend, "wait_snapshot", size, time.perf_counter() - started))
        assert finished == []
    return results


def growth(results: list[BulkResult]) -> dict[tuple[str, str, int], Optional[float]]:
    """Seconds ratio over size ratio against the previous size of the same backend and operation."""
    factors: dict[tuple[str, str, int], Optional[float]] = {}
    previous: dict[tuple[str, str], BulkResult] = {}
    for r in results:
        before = previous.get((r.backend, r.operation))
        factor = None
        if before is not None and before.seconds > 0:
            factor = (r.seconds / before.seconds) / (r.size / before.size)
        factors[(r.backend, r.operation, r.size)] = factor
        previous[(r.backend, r.operation)] = r
    return factors


def render(results: list[BulkResult], console: Console, prefill: int) -> None:
    table = Table(title=f"One store call over N rollouts (store prefilled with {prefill})")
    for column in ("backend", "operation", "N", "seconds", "rollouts/s", "growth"):
        table.add_column(column, justify="left" if column in ("backend", "operation") else "right")
    factors = growth(results)
    for r in sorted(results, key=lambda r: (r.backend, OPERATIONS.index(r.operation), r.size)):
        factor = factors[(r.backend, r.operation, r.size)]
        table.add_row(
            r.backend,
            r.operation,
            str(r.size),
            f"{r.seconds:.3f}",
            f"{r.per_second:,.0f}",
            "" if factor is None else f"{factor:.2f}",
        )
    console.print(table)


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: memory,sqlite,postgres")
    parser.add_argument("--sizes", default=None, help="comma-separated N values (default 2000,8000,32000)")
    parser.add_argument("--prefill", type=int, default=None, help="rollouts in the store before each call")
    parser.add_argument("--quick", action="store_true", help="N = 1000,4000,16000 and a prefill of 1000")
    parser.add_argument("--dsn", default=DEFAULT_DSN, help="PostgreSQL DSN for the postgres backend")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)

    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    for b in names:
        if b not in BACKENDS:
            parser.error(f"unknown backend {b!r}; choose from {', '.join(BACKENDS)}")
    default_sizes = "1000,4000,16000" if args.quick else "2000,8000,32000"
    sizes = [int(s) for s in (args.sizes or default_sizes).split(",") if s.strip()]
    prefill = args.prefill if args.prefill is not None else (1000 if args.quick else 5000)
    if not sizes or min(sizes) < 1 or prefill < 0:
        parser.error("--sizes must be positive and --prefill >= 0")

    console = Console()
    results: list[BulkResult] = []
    for name in names:
        for size in sizes:
            results.extend(asyncio.run(bench_size(name, size, prefill, args.dsn)))
    render(results, console, prefill)
    load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    console.print(f"[dim]{load}[/dim]")
    if args.json:
        factors = growth(results)
        rows: list[dict[str, Any]] = [
            {**asdict(r), "per_second": r.per_second, "growth": factors[(r.backend, r.operation, r.size)]}
            for r in results
        ]
        with open(args.json, "w") as handle:
            json.dump({"prefill": prefill, "load": load, "results": rows}, handle, indent=2)


if __name__ == "__main__":
    main()
