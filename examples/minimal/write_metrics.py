"""Record metrics from a store and from your own code, then read them on the console and from Prometheus.

Stores and the store server report counters and latency histograms (`agl.store.*`, `agl.http.*`)
through a `tracker`: a metrics backend. This script gives them two at once (`MultiMetricsBackend`):

  - `ConsoleMetricsBackend`, which aggregates in memory (`snapshot()`) and logs summaries, and
  - `PrometheusMetricsBackend` (the `prometheus` extra), which the store server exposes at
    `/v1/prometheus/` for a Prometheus server to scrape (`agl prometheus` aggregates many processes).

It runs a small workload (enqueue, dequeue, spans, finish), adds an application metric of its own
(`example.tasks.total`, `example.task.seconds`), then prints the console snapshot and the lines of the
Prometheus scrape that mention those metrics.

Run (from the repository root; needs the `prometheus` extra: `pip install -e ".[prometheus]"`):

    python examples/minimal/write_metrics.py
    python examples/minimal/write_metrics.py --rollouts 50

What to expect: "console snapshot:" with `agl.http.total` per route and status (8 enqueues, 8 dequeues;
a request is counted once its response is sent, so the last one may still be missing), `agl.rollouts.total` per store method, and the two example metrics (count 8, mean
time per task), then "prometheus scrape:" with the same numbers in Prometheus text format
(`example_tasks_total{kind="demo"} 8.0`).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx
from prometheus_client import CollectorRegistry

import agentlightning as agl
from agentlightning.tracking.metrics import ConsoleMetricsBackend, MultiMetricsBackend, PrometheusMetricsBackend
from agentlightning.web.launcher import pick_free_port


async def workload(store: agl.LightningStore, tracker: MultiMetricsBackend, rollouts: int) -> None:
    tracker.register_counter("example.tasks.total", ["kind"], description="tasks this script ran")
    tracker.register_histogram("example.task.seconds", ["kind"], description="time per task")
    for i in range(rollouts):
        started = time.perf_counter()
        await store.enqueue_rollout(input={"task": i}, mode="train")
        claimed = await store.dequeue_rollout(worker_id="worker-0")
        assert claimed is not None
        await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")
        tracker.inc_counter("example.tasks.total", labels={"kind": "demo"})
        tracker.observe_histogram("example.task.seconds", time.perf_counter() - started, labels={"kind": "demo"})


async def run(rollouts: int) -> None:
    console = ConsoleMetricsBackend(log_interval_seconds=0)
    prometheus = PrometheusMetricsBackend(registry=CollectorRegistry())
    tracker = MultiMetricsBackend([console, prometheus])
    store = agl.InMemoryLightningStore(tracker=tracker)
    server = agl.LightningStoreServer(store, port=pick_free_port(), tracker=tracker)
    await server.start()
    try:
        client = agl.LightningStoreClient(server.endpoint)
        await workload(client, tracker, rollouts)
        await client.close()
        print("console snapshot:")
        snapshot = console.snapshot()
        for name, series in sorted(snapshot["counters"].items()):
            for labels, value in sorted(series.items()):
                if name.startswith(("example.", "agl.http", "agl.rollouts")):
                    print(f"  {name}{labels} = {value:g}")
        for name, series in sorted(snapshot["histograms"].items()):
            if name.startswith("example."):
                for labels, summary in series.items():
                    print(f"  {name}{labels}: count {summary['count']}, mean {summary['mean'] * 1000:.1f} ms")
        async with httpx.AsyncClient() as http:
            scrape = (await http.get(f"{server.endpoint}/v1/prometheus/")).text
        print("prometheus scrape:")
        for line in scrape.splitlines():
            if line.startswith("example_tasks_total") or line.startswith("example_task_seconds_count"):
                print(f"  {line}")
    finally:
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts in the workload (default 8)")
    args = parser.parse_args()
    if args.rollouts < 1:
        parser.error(f"--rollouts must be >= 1, got {args.rollouts}")
    asyncio.run(run(args.rollouts))


if __name__ == "__main__":
    main()
