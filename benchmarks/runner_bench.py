"""Throughput of `LitAgentRunner` + tracer on the in-memory store, in one process.

Workloads:
  noop   an async agent that does nothing: rollouts/s of dequeue -> trace context -> finalise.
  reward an async agent that returns a float: adds the reward span post-processing.
  spans  an async agent that emits `--spans-per-rollout` message spans per rollout: spans/s.
  sync   the `spans` agent written as a sync function (runs inline on the event loop).

Each workload runs with `OtelTracer` (the real path: OpenTelemetry SDK spans delivered to the store)
and, for reference, `DummyTracer` (no span delivery at all).

Run:    .venv/bin/python benchmarks/runner_bench.py [--rollouts 2000] [--span-rollouts 200] [--quick]
Profile one workload:  .venv/bin/python benchmarks/runner_bench.py --profile spans
Expect: a table with rollouts/s and spans/s per workload and tracer (wall clock, and per CPU-second of
this process, which is the fairer number on a busy machine); never a pass/fail verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentlightning.emitter import emit_message  # noqa: E402
from agentlightning.litagent import LitAgent  # noqa: E402
from agentlightning.runner import LitAgentRunner  # noqa: E402
from agentlightning.store.memory import InMemoryLightningStore  # noqa: E402
from agentlightning.tracer import DummyTracer, OtelTracer, Tracer  # noqa: E402
from agentlightning.types import NamedResources, Rollout  # noqa: E402


class NoopAgent(LitAgent[int]):
    async def rollout_async(self, task: int, resources: NamedResources, rollout: Rollout) -> None:
        return None


class RewardAgent(LitAgent[int]):
    async def rollout_async(self, task: int, resources: NamedResources, rollout: Rollout) -> float:
        return 1.0


class SpanAgent(LitAgent[int]):
    def __init__(self, spans: int) -> None:
        super().__init__()
        self.spans = spans

    async def rollout_async(self, task: int, resources: NamedResources, rollout: Rollout) -> None:
        for i in range(self.spans):
            emit_message(f"step {i} of task {task}")


class SyncSpanAgent(LitAgent[int]):
    def __init__(self, spans: int) -> None:
        super().__init__()
        self.spans = spans

    def rollout(self, task: int, resources: NamedResources, rollout: Rollout) -> None:
        for i in range(self.spans):
            emit_message(f"step {i} of task {task}")


@dataclass
class Result:
    workload: str
    tracer: str
    rollouts: int
    spans: int
    seconds: float
    cpu_seconds: float

    @property
    def rollouts_per_s(self) -> float:
        return self.rollouts / self.seconds

    @property
    def spans_per_s(self) -> float:
        return self.spans / self.seconds

    @property
    def rollouts_per_cpu_s(self) -> float:
        return self.rollouts / self.cpu_seconds

    @property
    def spans_per_cpu_s(self) -> float:
        return self.spans / self.cpu_seconds


async def run_workload(name: str, agent: LitAgent[int], tracer: Tracer, rollouts: int) -> Result:
    """Enqueue `rollouts` tasks, then time one runner draining them with `iter()`."""
    store = InMemoryLightningStore()
    runner: LitAgentRunner[int] = LitAgentRunner(
        tracer, max_rollouts=rollouts, poll_interval=0.01, heartbeat_interval=0
    )
    with runner.run_context(agent=agent, store=store):
        ids = [(await store.enqueue_rollout(i, mode="train")).rollout_id for i in range(rollouts)]
        start, cpu_start = time.perf_counter(), time.process_time()
        await runner.iter()
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
    failed = [r.rollout_id for r in finished if r.status != "succeeded"]
    if len(finished) != rollouts or failed:
        raise RuntimeError(f"{name}: {len(finished)}/{rollouts} rollouts finished, {len(failed)} not succeeded")
    spans = (await store.statistics()).get("total_spans", 0)
    return Result(name, type(tracer).__name__, rollouts, int(spans), seconds, cpu_seconds)


def workloads(args: argparse.Namespace) -> dict[str, tuple[Callable[[], LitAgent[int]], int]]:
    return {
        "noop": (NoopAgent, args.rollouts),
        "reward": (RewardAgent, args.rollouts),
        "spans": (lambda: SpanAgent(args.spans_per_rollout), args.span_rollouts),
        "sync": (lambda: SyncSpanAgent(args.spans_per_rollout), args.span_rollouts),
    }


def print_table(results: list[Result]) -> None:
    """Wall-clock rates, plus rates per CPU-second of this process (all its threads); the latter stay
    meaningful when other processes compete for the cores."""
    header = (
        f"{'workload':<8} {'tracer':<12} {'rollouts':>8} {'spans':>7} {'wall s':>7} {'cpu s':>7} "
        f"{'rollouts/s':>10} {'spans/s':>8} {'rollouts/cpu-s':>14} {'spans/cpu-s':>11}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.workload:<8} {r.tracer:<12} {r.rollouts:>8} {r.spans:>7} {r.seconds:>7.2f} {r.cpu_seconds:>7.2f} "
            f"{r.rollouts_per_s:>10.0f} {r.spans_per_s:>8.0f} {r.rollouts_per_cpu_s:>14.0f} {r.spans_per_cpu_s:>11.0f}"
        )


async def main_async(args: argparse.Namespace) -> None:
    table = workloads(args)
    tracers: list[Callable[[], Tracer]] = [lambda: OtelTracer(instrument_openai=False), DummyTracer]
    if args.profile:
        make_agent, rollouts = table[args.profile]
        profiler = cProfile.Profile()
        profiler.enable()
        result = await run_workload(args.profile, make_agent(), tracers[0](), rollouts)
        profiler.disable()
        print_table([result])
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile_lines)
        return
    # Warm up imports, the OTel provider and the store code paths before timing.
    await run_workload("warmup", NoopAgent(), tracers[0](), 20)
    results: list[Result] = []
    for name, (make_agent, rollouts) in table.items():
        for make_tracer in tracers:
            results.append(await run_workload(name, make_agent(), make_tracer(), rollouts))
    print_table(results)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=2000, help="rollouts for the noop/reward workloads")
    parser.add_argument("--span-rollouts", type=int, default=200, help="rollouts for the spans/sync workloads")
    parser.add_argument("--spans-per-rollout", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="a tenth of the default sizes")
    parser.add_argument("--profile", choices=["noop", "reward", "spans", "sync"], help="cProfile one workload")
    parser.add_argument("--profile-lines", type=int, default=40)
    args = parser.parse_args(argv)
    if args.quick:
        args.rollouts = max(1, args.rollouts // 10)
        args.span_rollouts = max(1, args.span_rollouts // 10)
    return args


def main(argv: list[str] | None = None) -> Any:
    asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    main()
