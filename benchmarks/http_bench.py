"""HTTP store benchmark: what a request through LightningStoreServer/LightningStoreClient costs.

The server runs in its own process (as in the client-server execution strategy) over an in-memory
or SQLite store; the client measures, per operation, one call at a time (latency) and with
`--concurrency` calls in flight (throughput):
    add_span         one span per request
    next_seq_id      get_next_span_sequence_id
    dequeue+update   dequeue_rollout then update_attempt(succeeded): a runner's per-rollout cycle
    add_many_spans   `--batch-size` spans per request; ops/s counts spans
    otlp_export      OTLP/HTTP protobuf export of `--batch-size` spans to /v1/traces; ops/s counts spans

Run:
    python benchmarks/http_bench.py --quick
    python benchmarks/http_bench.py --backend sqlite -n 3000 --concurrency 64

Prints ops/s, p50 and p99 latency per operation. Numbers depend on the machine; never a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from rich.console import Console
from rich.table import Table

from agentlightning.store_http.client import LightningStoreClient
from agentlightning.types import EnqueueRolloutRequest, Span
from agentlightning.utils.server_launcher import pick_free_port


def _serve(port: int, backend: str, path: str) -> None:
    from agentlightning.store.memory import InMemoryLightningStore
    from agentlightning.store.sqlite import SqliteLightningStore
    from agentlightning.store_http.server import LightningStoreServer

    async def run() -> None:
        store: Any = InMemoryLightningStore() if backend == "memory" else SqliteLightningStore(path)
        server = LightningStoreServer(store, port=port, launch_mode="asyncio")
        await server.run_forever()

    asyncio.run(run())


async def _measure(
    name: str, n: int, concurrency: int, unit: int, op: Callable[[int], Awaitable[Any]]
) -> tuple[str, float, float, float]:
    latencies: list[float] = []
    for i in range(max(n // 5, 1)):  # latency: one call at a time
        started = time.perf_counter()
        await op(i)
        latencies.append(time.perf_counter() - started)
    semaphore = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with semaphore:
            await op(i)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return name, n * unit / elapsed, statistics.median(latencies) * 1e3, p99 * 1e3


async def _bench(endpoint: str, n: int, concurrency: int, batch: int) -> list[tuple[str, float, float, float]]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    client = LightningStoreClient(endpoint)
    while not await client.health():
        await asyncio.sleep(0.05)
    rollout = await client.start_rollout(input="bench")
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    span = Span.from_attributes(rollout_id=rid, attempt_id=aid, sequence_id=1, attributes={"k": "v" * 100, "n": 1})
    results = []
    results.append(await _measure("add_span", n, concurrency, 1, lambda i: client.add_span(span)))
    results.append(
        await _measure("next_seq_id", n, concurrency, 1, lambda i: client.get_next_span_sequence_id(rid, aid))
    )

    await client.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(n + n // 5 + 1)])

    async def cycle(i: int) -> None:
        claimed = await client.dequeue_rollout(worker_id=f"w-{i % 8}")
        assert claimed is not None
        await client.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")

    results.append(await _measure("dequeue+update", n, concurrency, 1, cycle))
    spans = [span] * batch
    results.append(
        await _measure(
            "add_many_spans", max(n // batch, 10), concurrency, batch, lambda i: client.add_many_spans(spans)
        )
    )

    resource = Resource.create({"agentlightning.rollout_id": rid, "agentlightning.attempt_id": aid})
    otel = [
        ReadableSpan(
            name="llm",
            context=SpanContext(trace_id=1, span_id=i + 1, is_remote=False, trace_flags=TraceFlags(1)),
            resource=resource,
            attributes={"k": "v" * 100},
            start_time=1_700_000_000_000_000_000,
            end_time=1_700_000_001_000_000_000,
        )
        for i in range(batch)
    ]
    body = encode_spans(otel).SerializeToString()
    async with aiohttp.ClientSession() as session:

        async def export(i: int) -> None:
            async with session.post(
                f"{endpoint}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
            ) as response:
                assert response.status == 200, await response.text()

        results.append(await _measure("otlp_export", max(n // batch, 10), concurrency, batch, export))
    await client.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("memory", "sqlite"), default="memory")
    parser.add_argument("-n", type=int, default=2000, help="calls per operation (default 2000)")
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight for throughput (default 32)")
    parser.add_argument("--batch-size", type=int, default=50, help="spans per batch request (default 50)")
    parser.add_argument("--quick", action="store_true", help="n=500, for a smoke run")
    args = parser.parse_args()
    n = 500 if args.quick else args.n

    port = pick_free_port()
    with tempfile.TemporaryDirectory() as tmp:
        ctx = multiprocessing.get_context("spawn")
        server = ctx.Process(target=_serve, args=(port, args.backend, os.path.join(tmp, "bench.db")), daemon=True)
        server.start()
        try:
            rows = asyncio.run(_bench(f"http://127.0.0.1:{port}", n, args.concurrency, args.batch_size))
        finally:
            if server.pid is not None:
                os.kill(server.pid, signal.SIGINT)
            server.join(30)

    table = Table(title=f"HTTP store ({args.backend}, server in its own process, concurrency {args.concurrency})")
    for column in ("operation", "ops/s", "p50 ms", "p99 ms"):
        table.add_column(column, justify="right" if column != "operation" else "left")
    for name, rate, p50, p99 in rows:
        table.add_row(name, f"{rate:,.0f}", f"{p50:.2f}", f"{p99:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
