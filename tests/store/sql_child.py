"""A separate process running one SQL store workload, for the multi-process tests of the SQL stores.

    python -m tests.store.sql_child WORKLOAD sqlite PATH
    python -m tests.store.sql_child WORKLOAD postgres DSN SCHEMA

The child opens its own store, prints `ready`, waits for a line on stdin (so the test can start
several children at the same moment), runs the workload and prints JSON lines on stdout.
Workloads:
    dequeue  - dequeue until the queue is empty (batch size `--limit`); prints {"claimed": [...], "seconds": ...}.
    write    - forever: start a rollout, add 5 spans, finish it; prints one line per committed rollout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from agentlightning.store.base import LightningStore
from agentlightning.types import Span


def open_store(args: argparse.Namespace) -> LightningStore:
    if args.backend == "sqlite":
        from agentlightning.store.sqlite import SqliteLightningStore

        return SqliteLightningStore(args.target)
    from agentlightning.store.postgres import PostgresLightningStore

    return PostgresLightningStore(args.target, schema=args.schema, min_pool_size=1, max_pool_size=2)


def report(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


async def dequeue(store: LightningStore, limit: int) -> None:
    worker_id = f"worker-{os.getpid()}"
    claimed: list[str] = []
    started = time.perf_counter()
    while True:
        batch = await store.dequeue_many_rollouts(limit=limit, worker_id=worker_id)
        if not batch:
            break
        claimed.extend(r.rollout_id for r in batch)
    report({"claimed": claimed, "seconds": time.perf_counter() - started})


async def write_forever(store: LightningStore) -> None:
    index = 0
    while True:
        rollout = await store.start_rollout(input={"index": index})
        attempt_id = rollout.attempt.attempt_id
        spans = [
            Span.from_attributes(
                rollout_id=rollout.rollout_id,
                attempt_id=attempt_id,
                sequence_id=sequence_id,
                attributes={"index": index, "sequence_id": sequence_id},
            )
            for sequence_id in range(1, 6)
        ]
        await store.add_many_spans(spans)
        await store.update_attempt(rollout.rollout_id, attempt_id, status="succeeded")
        # Printed only after every write above committed.
        report({"rollout_id": rollout.rollout_id, "index": index, "span_ids": [s.span_id for s in spans]})
        index += 1


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=["dequeue", "write"])
    parser.add_argument("backend", choices=["sqlite", "postgres"])
    parser.add_argument("target", help="SQLite file path or PostgreSQL DSN")
    parser.add_argument("schema", nargs="?", default=None)
    parser.add_argument("--limit", type=int, default=1)
    args = parser.parse_args()
    store = open_store(args)
    report({"ready": os.getpid()})
    sys.stdin.readline()
    try:
        if args.workload == "dequeue":
            await dequeue(store, args.limit)
        else:
            await write_forever(store)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main())
