"""HTTP store benchmark: what a request through LightningStoreServer/LightningStoreClient costs.

The server runs in its own process (as in the client-server execution strategy) over an in-memory
or SQLite store; the client measures, per operation, one call at a time (latency) and with
`--concurrency` calls in flight (throughput):
    add_span         one span per request
    next_seq_id      get_next_span_sequence_id
    dequeue+update   dequeue_rollout then update_attempt(succeeded): a runner's per-rollout cycle
    add_many_spans   `--batch-size` spans per request; ops/s counts spans
    otlp_export      OTLP/HTTP protobuf export of `--batch-size` spans to /v1/traces; ops/s counts spans
and a rollout's whole life, one flow at a time from one client (ops/s counts flows; `req/flow` is the
number of HTTP requests each flow sent):
    flow v0.3        enqueue, dequeue, 5 x add_span, update_attempt(succeeded): the v0.3 calls
    flow batched     enqueue, dequeue, finish_attempt(succeeded, 5 spans): the status rides with the spans

Run:
    python benchmarks/http_bench.py --quick
    python benchmarks/http_bench.py --backend sqlite -n 3000 --concurrency 64 --json http.json

Prints ops/s, p50 and p99 latency per operation, the machine's load, and (unless `--no-ceiling`) the
ceiling: a bare FastAPI app answering `{}` under the same uvicorn, called by the same aiohttp client one
request at a time. Numbers depend on the machine; never a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from multiprocessing.process import BaseProcess
from typing import Any

import aiohttp
from rich.console import Console
from rich.table import Table

from agentlightning.store_http.client import LightningStoreClient
from agentlightning.types import AUTO_SEQUENCE_ID, EnqueueRolloutRequest, Span
from agentlightning.web.launcher import pick_free_port


class _CountingClient(LightningStoreClient):
    """The client, counting the HTTP requests it sends (retries included)."""

    requests = 0

    async def _request(self, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        return await super()._request(*args, **kwargs)


def _serve_echo(port: int) -> None:
    import uvicorn
    from fastapi import FastAPI
    from starlette.responses import Response

    app = FastAPI()

    @app.post("/echo")
    async def echo() -> Response:
        return Response(b"{}", media_type="application/json")

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


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


async def _bench(
    endpoint: str, n: int, concurrency: int, batch: int, per_flow: dict[str, float]
) -> list[tuple[str, float, float, float]]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    client = _CountingClient(endpoint)
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

    flow_spans = [
        Span.from_attributes(
            rollout_id=rid, attempt_id=aid, sequence_id=AUTO_SEQUENCE_ID, attributes={"k": "v" * 100, "n": i}
        )
        for i in range(5)
    ]

    async def flow_v03(i: int) -> None:
        await client.enqueue_rollout(input=i)
        claimed = await client.dequeue_rollout(worker_id="w-flow")
        assert claimed is not None
        crid, caid = claimed.rollout_id, claimed.attempt.attempt_id
        for seq, template in enumerate(flow_spans, start=1):
            await client.add_span(
                template.model_copy(update={"rollout_id": crid, "attempt_id": caid, "sequence_id": seq})
            )
        await client.update_attempt(crid, caid, status="succeeded")

    async def flow_batched(i: int) -> None:
        await client.enqueue_rollout(input=i)
        claimed = await client.dequeue_rollout(worker_id="w-flow")
        assert claimed is not None
        crid, caid = claimed.rollout_id, claimed.attempt.attempt_id
        spans = [template.model_copy(update={"rollout_id": crid, "attempt_id": caid}) for template in flow_spans]
        await client.finish_attempt(crid, caid, "succeeded", spans)

    flows = max(n // 2, 10)
    for name, flow in (("flow v0.3", flow_v03), ("flow batched", flow_batched)):
        before = client.requests
        results.append(await _measure(name, flows, 1, 1, flow))
        per_flow[name] = (client.requests - before) / (flows + max(flows // 5, 1))
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


async def _ceiling(endpoint: str, n: int) -> tuple[str, float, float, float]:
    async with aiohttp.ClientSession() as session:

        async def call(i: int) -> None:
            async with session.post(f"{endpoint}/echo", data=b"{}") as response:
                await response.read()

        for _ in range(20):  # warm the connection
            await call(0)
        return await _measure("ceiling: bare echo", n, 1, 1, call)


def _start(target: Any, *args: Any) -> BaseProcess:
    process = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    process.start()
    return process


def _stop(process: BaseProcess) -> None:
    if process.pid is not None:
        os.kill(process.pid, signal.SIGINT)
    process.join(30)


async def _wait_until_up(endpoint: str) -> None:
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.post(f"{endpoint}/echo", data=b"{}") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("memory", "sqlite"), default="memory")
    parser.add_argument("-n", type=int, default=2000, help="calls per operation (default 2000)")
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight for throughput (default 32)")
    parser.add_argument("--batch-size", type=int, default=50, help="spans per batch request (default 50)")
    parser.add_argument("--quick", action="store_true", help="n=500, for a smoke run")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the bare FastAPI echo measurement")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    n = 500 if args.quick else args.n

    per_flow: dict[str, float] = {}
    port = pick_free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = _start(_serve, port, args.backend, os.path.join(tmp, "bench.db"))
        try:
            endpoint = f"http://127.0.0.1:{port}"
            rows = asyncio.run(_bench(endpoint, n, args.concurrency, args.batch_size, per_flow))
        finally:
            _stop(server)
    if not args.no_ceiling:
        port = pick_free_port()
        echo = _start(_serve_echo, port)
        try:
            endpoint = f"http://127.0.0.1:{port}"
            asyncio.run(_wait_until_up(endpoint))
            rows.append(asyncio.run(_ceiling(endpoint, n)))
        finally:
            _stop(echo)

    table = Table(title=f"HTTP store ({args.backend}, server in its own process, concurrency {args.concurrency})")
    for column in ("operation", "ops/s", "p50 ms", "p99 ms", "req/flow"):
        table.add_column(column, justify="right" if column != "operation" else "left")
    for name, rate, p50, p99 in rows:
        requests = f"{per_flow[name]:.1f}" if name in per_flow else ""
        table.add_row(name, f"{rate:,.0f}", f"{p50:.2f}", f"{p99:.2f}", requests)
    console = Console()
    console.print(table)
    load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    console.print(f"[dim]flows and the ceiling run one call at a time; {load}[/dim]")
    if args.json:
        results = [
            {
                "operation": name,
                "ops_per_second": rate,
                "p50_ms": p50,
                "p99_ms": p99,
                **({"requests_per_flow": per_flow[name]} if name in per_flow else {}),
            }
            for name, rate, p50, p99 in rows
        ]
        with open(args.json, "w") as handle:
            json.dump({"backend": args.backend, "load": load, "results": results}, handle, indent=2)


if __name__ == "__main__":
    main()
