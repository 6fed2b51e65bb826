"""End-to-end training throughput: Trainer + an execution strategy + N runners + a synthetic agent.

Strategies: `cs` (client-server: runner processes forked from the trainer) or `ray` (runner actors on a
local Ray instance started for the run, reaching the store server over HTTP like on a cluster).

Mirrors the reference `benchmark_store` workload: the algorithm enqueues rollouts in batches, runner
processes execute a synthetic agent that opens `--max-rounds` OpenTelemetry spans with random
attributes (sleeping `--sleep-seconds` in each) and returns a reward, and the algorithm waits for every
rollout and verifies its spans. Reports rollouts/s and spans/s over the measured window (first enqueue to
last verification).

Run:
    python benchmarks/e2e_bench.py --total-tasks 2000 --batch-size 128 --n-runners 4 --max-rounds 5 \
        --sleep-seconds 0 --backend memory
    python benchmarks/e2e_bench.py --backend sqlite ...
    agl store --port 4747 &  python benchmarks/e2e_bench.py --store-url http://127.0.0.1:4747 ...
    python benchmarks/e2e_bench.py --compare-strategies --n-runners 4 --json runs/e2e_strategies.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import socket
import string
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import psutil
from opentelemetry import trace as trace_api

import agentlightning as agl
from agentlightning.algorithm import algo
from agentlightning.types import EnqueueRolloutRequest, NamedResources, Rollout

WAIT_POLL_SECONDS = 0.02


@dataclass
class BenchResult:
    rollouts: int = 0
    succeeded: int = 0
    spans: int = 0
    missing_spans: int = 0
    started: float = 0.0
    finished: float = 0.0
    batch_seconds: list[float] = field(default_factory=list)
    cpu_main: float = 0.0
    cpu_runners: float = 0.0

    @property
    def elapsed(self) -> float:
        return max(self.finished - self.started, 1e-9)


class SyntheticAgent(agl.LitAgent[dict[str, Any]]):
    """Opens `max_rounds` spans with random attributes, sleeping in each, then returns a reward."""

    def __init__(self, max_rounds: int, sleep_seconds: float) -> None:
        super().__init__()
        self.max_rounds = max_rounds
        self.sleep_seconds = sleep_seconds

    async def rollout_async(
        self, task: dict[str, Any], resources: NamedResources, rollout: agl.Rollout
    ) -> Optional[float]:
        tracer = trace_api.get_tracer("agentlightning.benchmark")
        for round_index in range(self.max_rounds):
            attributes = {
                "round": round_index,
                "task": str(task.get("index")),
                "payload": "".join(random.choices(string.ascii_letters, k=64)),
                "score": random.random(),
            }
            with tracer.start_as_current_span(f"benchmark.round.{round_index}", attributes=attributes):
                if self.sleep_seconds > 0:
                    await asyncio.sleep(self.sleep_seconds)
        return random.random()


def _cpu_seconds() -> tuple[float, float]:
    """CPU seconds used so far by this process (algorithm + store server) and by its child processes (runners)."""
    me = psutil.Process()
    own = me.cpu_times()
    children = 0.0
    for child in me.children(recursive=True):
        try:
            times = child.cpu_times()
            children += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return own.user + own.system, children


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait_all(store: agl.LightningStore, rollout_ids: list[str]) -> list[Rollout]:
    pending = list(rollout_ids)
    finished: list[Rollout] = []
    while pending:
        done = await store.wait_for_rollouts(rollout_ids=pending, timeout=0)
        if done:
            finished.extend(done)
            done_ids = {r.rollout_id for r in done}
            pending = [r for r in pending if r not in done_ids]
        if pending:
            await asyncio.sleep(WAIT_POLL_SECONDS)
    return finished


async def _verify(store: agl.LightningStore, rollouts: list[Rollout], expected_spans: int, result: BenchResult) -> None:
    for rollout in rollouts:
        result.rollouts += 1
        if rollout.status == "succeeded":
            result.succeeded += 1
        spans = await store.query_spans(rollout.rollout_id, "latest")
        result.spans += len(spans)
        if len(spans) < expected_spans:
            result.missing_spans += expected_spans - len(spans)


async def _wait_for_runners(store: agl.LightningStore, n_runners: int, timeout: float = 120.0) -> None:
    """Start the clock only once every runner has reported to the store (process start-up is not throughput)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(await store.query_workers()) >= n_runners:
            return
        await asyncio.sleep(0.05)
    print(f"warning: only {len(await store.query_workers())} of {n_runners} runners reported within {timeout:.0f} s")


def make_algorithm(args: argparse.Namespace, result: BenchResult) -> Any:
    expected_spans = args.max_rounds + 1  # the rounds plus the reward span

    @algo
    async def throughput_algorithm(*, store: agl.LightningStore) -> None:
        counter = 0

        def requests(n: int) -> list[EnqueueRolloutRequest]:
            nonlocal counter
            batch = [EnqueueRolloutRequest(input={"index": counter + i}, mode="train") for i in range(n)]
            counter += n
            return batch

        await _wait_for_runners(store, args.n_runners)
        cpu_main_start, cpu_runners_start = _cpu_seconds()
        result.started = time.perf_counter()
        if args.mode == "batch":
            remaining = args.total_tasks
            while remaining > 0:
                size = min(args.batch_size, remaining)
                batch_start = time.perf_counter()
                enqueued = await store.enqueue_many_rollouts(requests(size))
                finished = await _wait_all(store, [r.rollout_id for r in enqueued])
                await _verify(store, finished, expected_spans, result)
                result.batch_seconds.append(time.perf_counter() - batch_start)
                remaining -= size
        else:  # batch_partial: keep the queue topped up, harvesting as rollouts finish
            in_flight: list[str] = []
            submitted = 0
            while submitted < args.total_tasks or in_flight:
                if submitted < args.total_tasks and len(in_flight) <= args.remaining_tasks:
                    size = min(args.batch_size, args.total_tasks - submitted)
                    enqueued = await store.enqueue_many_rollouts(requests(size))
                    in_flight.extend(r.rollout_id for r in enqueued)
                    submitted += size
                done = await store.wait_for_rollouts(rollout_ids=in_flight, timeout=0)
                if done:
                    done_ids = {r.rollout_id for r in done}
                    in_flight = [r for r in in_flight if r not in done_ids]
                    await _verify(store, done, expected_spans, result)
                else:
                    await asyncio.sleep(WAIT_POLL_SECONDS)
        result.finished = time.perf_counter()
        cpu_main_end, cpu_runners_end = _cpu_seconds()
        result.cpu_main = cpu_main_end - cpu_main_start
        result.cpu_runners = cpu_runners_end - cpu_runners_start

    return throughput_algorithm


def make_store(args: argparse.Namespace, tmpdir: str) -> tuple[agl.LightningStore, bool]:
    """The store and whether the strategy should manage (serve) it."""
    if args.store_url:
        from agentlightning.store_http.client import LightningStoreClient

        return LightningStoreClient(args.store_url), False
    if args.backend == "sqlite":
        from agentlightning.store.sqlite import SqliteLightningStore

        return SqliteLightningStore(os.path.join(tmpdir, "bench.sqlite")), True
    from agentlightning.store.memory import InMemoryLightningStore

    return InMemoryLightningStore(thread_safe=True), True


def make_strategy(args: argparse.Namespace, managed: bool) -> Any:
    if args.strategy == "ray":
        import ray.cloudpickle

        # Runner actors unpickle the agent; this file is not importable there, so ship it by value.
        ray.cloudpickle.register_pickle_by_value(sys.modules[SyntheticAgent.__module__])
        return agl.RayExecutionStrategy(
            n_runners=args.n_runners,
            address="local",  # a fresh Ray for the run, never a cluster already running on this machine
            num_cpus=0.5,
            server_host="127.0.0.1",
            server_port=args.port or _free_port(),
            managed_store=managed,
            graceful_timeout=5.0,
            init_kwargs={
                "num_cpus": args.n_runners,
                "include_dashboard": False,
                "object_store_memory": 80 * 1024 * 1024,
                "logging_level": "WARNING",
            },
        )
    return agl.ClientServerExecutionStrategy(
        role="both",
        server_host="127.0.0.1",
        server_port=args.port or _free_port(),
        n_runners=args.n_runners,
        managed_store=managed,
        graceful_timeout=5.0,
        terminate_timeout=5.0,
    )


def run(args: argparse.Namespace) -> BenchResult:
    result = BenchResult()
    with tempfile.TemporaryDirectory(prefix="agl-e2e-bench-") as tmpdir:
        store, managed = make_store(args, tmpdir)
        strategy = make_strategy(args, managed)
        runner: dict[str, Any] = {"type": "agentlightning.runner.LitAgentRunner", "heartbeat_interval": 10.0}
        if args.poll_interval is not None:
            runner["poll_interval"] = args.poll_interval
        trainer = agl.Trainer(
            algorithm=make_algorithm(args, result),
            store=store,
            strategy=strategy,
            tracer=agl.OtelTracer(),
            runner=runner,
        )
        trainer.fit(SyntheticAgent(args.max_rounds, args.sleep_seconds), train_dataset=[])
    return result


def summary(args: argparse.Namespace, result: BenchResult) -> dict[str, Any]:
    return {
        "strategy": args.strategy,
        "backend": args.store_url or args.backend,
        "mode": args.mode,
        "n_runners": args.n_runners,
        "max_rounds": args.max_rounds,
        "sleep_seconds": args.sleep_seconds,
        "total_tasks": args.total_tasks,
        "batch_size": args.batch_size,
        "rollouts": result.rollouts,
        "succeeded": result.succeeded,
        "spans": result.spans,
        "missing_spans": result.missing_spans,
        "elapsed_s": round(result.elapsed, 3),
        "rollouts_per_s": round(result.rollouts / result.elapsed, 2),
        "spans_per_s": round(result.spans / result.elapsed, 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def print_report(args: argparse.Namespace, result: BenchResult) -> None:
    backend = f"external {args.store_url}" if args.store_url else args.backend
    rows = [
        ("strategy", args.strategy),
        ("backend", backend),
        ("mode", args.mode),
        ("runners x rounds x sleep", f"{args.n_runners} x {args.max_rounds} x {args.sleep_seconds}s"),
        ("total tasks / batch", f"{args.total_tasks} / {args.batch_size}"),
        ("runner poll_interval", "default" if args.poll_interval is None else f"{args.poll_interval}s"),
        ("rollouts (succeeded)", f"{result.rollouts} ({result.succeeded})"),
        ("spans (missing)", f"{result.spans} ({result.missing_spans})"),
        ("elapsed", f"{result.elapsed:.2f} s"),
        ("rollouts/s", f"{result.rollouts / result.elapsed:.1f}"),
        ("spans/s", f"{result.spans / result.elapsed:.1f}"),
        ("CPU ms/rollout: algorithm+server", f"{1000 * result.cpu_main / max(result.rollouts, 1):.2f}"),
        ("CPU ms/rollout: runners", f"{1000 * result.cpu_runners / max(result.rollouts, 1):.2f}"),
    ]
    width = max(len(k) for k, _ in rows)
    print("-" * (width + 30))
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    print("-" * (width + 30))


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["batch", "batch_partial"], default="batch")
    parser.add_argument("--total-tasks", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--remaining-tasks", type=int, default=256, help="batch_partial: in-flight target")
    parser.add_argument("--n-runners", type=int, default=4)
    parser.add_argument("--max-rounds", type=int, default=5)
    parser.add_argument("--sleep-seconds", type=float, default=0.0)
    parser.add_argument("--backend", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--store-url", default=None, help="use an external store (e.g. `agl store`) instead")
    parser.add_argument("--port", type=int, default=None, help="port of the managed store server (default: free)")
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=None,
        help="runner poll_interval, the longest idle wait on an empty queue (default: the runner's own, 5 s)",
    )
    parser.add_argument("--strategy", choices=["cs", "ray"], default="cs", help="execution strategy (default cs)")
    parser.add_argument(
        "--compare-strategies", action="store_true", help="run cs then ray with the same settings; print both"
    )
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    for name in ("total_tasks", "batch_size", "n_runners"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.max_rounds < 0:
        parser.error("--max-rounds must be >= 0")
    return args


def print_comparison(rows: list[dict[str, Any]]) -> None:
    print(f"{'strategy':<10}{'rollouts':>10}{'spans':>8}{'elapsed s':>11}{'rollouts/s':>12}{'spans/s':>10}{'load':>7}")
    for row in rows:
        print(
            f"{row['strategy']:<10}{row['rollouts']:>10}{row['spans']:>8}{row['elapsed_s']:>11.2f}"
            f"{row['rollouts_per_s']:>12.1f}{row['spans_per_s']:>10.1f}{row['load_avg_1m']:>7.2f}"
        )


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING)
    rows: list[dict[str, Any]] = []
    for strategy in ["cs", "ray"] if args.compare_strategies else [args.strategy]:
        args.strategy = strategy
        result = run(args)
        print_report(args, result)
        rows.append(summary(args, result))
    if len(rows) > 1:
        print_comparison(rows)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
