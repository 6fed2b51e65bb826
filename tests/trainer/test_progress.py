"""While the algorithm waits, the run prints progress; when nothing can move any more, it fails saying why."""

from __future__ import annotations

import asyncio
import inspect
import io
import os
import signal
import time
from typing import Any

import pytest

import agentlightning as agl
from agentlightning.algorithm import algo
from agentlightning.runner.agent import LitAgentRunner
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.trainer.progress import (
    SETTLE_GRACE_SECONDS,
    STALL_ENV,
    STALL_TIMEOUT_SECONDS,
    RunProgress,
    format_duration,
    settled_by,
)
from agentlightning.trainer.run_store import RUN_METADATA_KEY, RunStore
from agentlightning.types import (
    Attempt,
    AttemptedRollout,
    EnqueueRolloutRequest,
    NamedResources,
    Rollout,
    RolloutConfig,
)
from agentlightning.types.core import DEFAULT_TIMEOUT_SECONDS, DEFAULT_UNRESPONSIVE_SECONDS
from agentlightning.utils.server_launcher import pick_free_port


def test_durations_read_naturally() -> None:
    assert [format_duration(s) for s in (0, 42.7, 185, 3720)] == ["0 s", "42 s", "3 min 05 s", "1 h 02 min"]


async def test_the_run_store_tags_and_remembers_the_rollouts_it_creates() -> None:
    store = RunStore(InMemoryLightningStore(), "quickstart.py 10:00")
    one = await store.enqueue_rollout(input=1, metadata={"keep": True})
    two = await store.start_rollout(input=2)
    (three,) = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=3, mode="val")])
    assert store.rollout_ids == [one.rollout_id, two.rollout_id, three.rollout_id]
    stored = {r.rollout_id: r.metadata for r in await store.store.query_rollouts()}
    assert stored[one.rollout_id] == {"keep": True, RUN_METADATA_KEY: "quickstart.py 10:00"}
    assert all(m is not None and m[RUN_METADATA_KEY] == "quickstart.py 10:00" for m in stored.values())


async def test_a_progress_line_counts_done_failed_running_and_queued_per_mode() -> None:
    store = RunStore(InMemoryLightningStore(), "run")
    progress = RunProgress(store, algorithm_name="GRPO")
    assert progress.line().endswith(": GRPO has not started a rollout yet")
    done = await store.start_rollout(input=0, mode="train")
    failed = await store.start_rollout(input=1, mode="train")
    await store.start_rollout(input=2, mode="train")  # running
    await store.enqueue_rollout(input=3, mode="val")  # queued
    await store.update_attempt(done.rollout_id, done.attempt.attempt_id, status="succeeded")
    await store.update_attempt(failed.rollout_id, failed.attempt.attempt_id, status="failed")
    assert await progress.refresh()
    assert progress.line().split(": ", 2)[2] == "train 2/3 done (1 failed), val 0/1 done; 1 running, 1 queued"
    assert not await progress.refresh()  # nothing moved


async def test_rollouts_nobody_takes_end_the_wait_with_an_error() -> None:
    store = RunStore(InMemoryLightningStore(), "run")
    await store.enqueue_rollout(input=1)
    progress = RunProgress(store, algorithm_name="Baseline", interval=None, stall_timeout=0.3, check_every=0.05)
    with pytest.raises(agl.RunError, match=r"for the 1 unfinished rollouts of this run \(1 queued, 0 running\)"):
        await asyncio.wait_for(progress.watch(), timeout=30)


async def test_a_rollout_held_by_a_runner_that_stopped_heartbeating_ends_the_wait() -> None:
    inner = InMemoryLightningStore()
    store = RunStore(inner, "run")
    # No silence limit nor timeout: the store's watchdog never ends this attempt, so only the stall check can.
    no_limits = RolloutConfig(timeout_seconds=None, unresponsive_seconds=None)
    held = await store.start_rollout(input=1, config=no_limits, worker_id="Worker-0")
    await inner.update_attempt(held.rollout_id, held.attempt.attempt_id, status="running", worker_id="Worker-0")
    await inner.update_worker("Worker-0", heartbeat_stats={})
    live = RunProgress(store, algorithm_name="Baseline", interval=None, stall_timeout=5.0, check_every=0.05)
    await live.refresh()
    assert await live._can_move()  # heartbeat 0 s ago: a long rollout, not a stall
    dead = RunProgress(store, algorithm_name="Baseline", interval=None, stall_timeout=0.3, check_every=0.05)
    await asyncio.sleep(0.4)
    with pytest.raises(agl.RunError, match="1 running"):
        await asyncio.wait_for(dead.watch(), timeout=30)


class SlowAgent(agl.LitAgent[float]):
    async def rollout_async(self, task: float, resources: NamedResources, rollout: Rollout) -> float:
        await asyncio.sleep(task)
        return 1.0


def test_fit_prints_progress_while_the_algorithm_waits(capsys: pytest.CaptureFixture[str]) -> None:
    trainer = agl.Trainer(
        algorithm=agl.Baseline(polling_interval=0.05),
        strategy={"type": "shm", "main_thread": "algorithm", "n_runners": 1},
        tracer=OtelTracer(),
        runner={"poll_interval": 0.05, "heartbeat_interval": 60.0},
        progress_interval=0.2,
    )
    trainer.fit(SlowAgent(), train_dataset=[1.0])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("agentlightning: ")]
    assert lines, "no progress line while the rollout ran for 1 s"
    assert any("train 0/1 done; 1 running, 0 queued" in line for line in lines)


def test_an_algorithm_whose_runners_never_come_fails_with_what_it_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_STALL_SECONDS", "1")

    @algo
    async def waits(*, store: agl.LightningStore) -> None:
        rollout = await store.enqueue_rollout(input=1)
        await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id])

    trainer = agl.Trainer(
        algorithm=waits,
        strategy={"type": "cs", "role": "algorithm", "server_port": 0},
        tracer=OtelTracer(),
        progress_interval=0.25,
    )
    with pytest.raises(agl.RunError, match="AGL_CURRENT_ROLE=runner") as raised:
        trainer.fit(SlowAgent(), [])
    assert "waited 1 s for the 1 unfinished rollouts" in str(raised.value)
    assert len(raised.traceback) == 3  # this test, fit, _execute: no wall of frames


def test_progress_output_goes_where_asked() -> None:
    output = io.StringIO()
    progress = RunProgress(RunStore(InMemoryLightningStore(), "run"), algorithm_name="APO", output=output)
    print(progress.line(), file=progress.output)
    assert "APO has not started a rollout yet" in output.getvalue()


# ---- a runner that died holding a rollout: the store settles the attempt first (issue 38 point 6) ----


class SelfKilling(agl.LitAgent[str]):
    """In its first attempt, its runner process SIGKILLs itself mid-rollout (as the OOM killer would)."""

    async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        if rollout.attempt.sequence_id == 1:  # type: ignore[attr-defined]
            os.kill(os.getpid(), signal.SIGKILL)
        return 1.0


def test_the_default_limits_let_the_store_settle_a_dead_runners_attempt_before_the_run_gives_up() -> None:
    # A runner heartbeats far more often than the silence limit, which comes long before the attempt timeout.
    heartbeat = inspect.signature(LitAgentRunner.__init__).parameters["heartbeat_interval"].default
    assert 3 * heartbeat <= DEFAULT_UNRESPONSIVE_SECONDS
    assert DEFAULT_UNRESPONSIVE_SECONDS < DEFAULT_TIMEOUT_SECONDS
    held = AttemptedRollout(
        rollout_id="ro-1",
        input=1,
        start_time=0.0,
        attempt=Attempt(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, start_time=0.0),
    )
    assert settled_by(held) == DEFAULT_UNRESPONSIVE_SECONDS  # the default config's silence limit, from the start
    # The run's stall limit alone (180 s) would fire before the store's silence limit (300 s) ...
    assert STALL_TIMEOUT_SECONDS < DEFAULT_UNRESPONSIVE_SECONDS
    # ... so a held rollout counts as moving until that limit (and the grace for the watchdog) passed.
    assert SETTLE_GRACE_SECONDS < STALL_TIMEOUT_SECONDS


@pytest.mark.parametrize(("started_ago", "can_move"), [(200.0, True), (DEFAULT_UNRESPONSIVE_SECONDS + 60.0, False)])
async def test_a_rollout_of_a_dead_runner_is_no_stall_until_its_silence_limit(
    started_ago: float, can_move: bool
) -> None:
    inner = InMemoryLightningStore(clock=lambda: time.time() - started_ago)
    store = RunStore(inner, "run")
    await store.start_rollout(input=1, worker_id="Worker-dead")
    await inner.update_worker("Worker-dead", heartbeat_stats={})  # its last heartbeat: when the attempt began
    progress = RunProgress(store, algorithm_name="Baseline", interval=None)  # default 180 s stall limit
    await progress.refresh()
    assert await progress._can_move() is can_move  # pyright: ignore[reportPrivateUsage]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "status", "attempts"),
    [
        (RolloutConfig(unresponsive_seconds=3.0), "failed", ["unresponsive"]),
        (
            RolloutConfig(unresponsive_seconds=3.0, max_attempts=2, retry_condition=["unresponsive"]),
            "succeeded",
            ["unresponsive", "succeeded"],
        ),
    ],
    ids=["failed", "retried"],
)
def test_a_killed_runners_rollout_is_failed_or_retried_at_the_silence_limit(
    monkeypatch: pytest.MonkeyPatch, config: RolloutConfig, status: str, attempts: list[str]
) -> None:
    """Limits shrunk to seconds (stall 1 s, silence 3 s); one of two runners is killed. The stall check must
    leave the attempt to the store's watchdog, which fails or retries it as the rollout's config says."""
    monkeypatch.setenv(STALL_ENV, "1")
    outcome: dict[str, Any] = {}

    @algo
    async def one_rollout(*, store: agl.LightningStore) -> None:
        for _ in range(600):  # bounded (60 s): a runner not started yet would be a stall of its own
            if await store.query_workers():
                break
            await asyncio.sleep(0.1)
        rollout = await store.enqueue_rollout(input="x", config=config)
        for _ in range(120):  # bounded: at most 120 s
            done = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=1.0)
            if done:
                outcome["rollout"] = done[0]
                break
        outcome["attempts"] = list(await store.query_attempts(rollout.rollout_id))

    trainer = agl.Trainer(
        algorithm=one_rollout,
        n_runners=2,
        strategy={"type": "cs", "server_host": "127.0.0.1", "server_port": pick_free_port(), "graceful_timeout": 2.0},
        tracer=OtelTracer(),
        runner={"poll_interval": 0.05, "heartbeat_interval": 0.2},  # live (to the 1 s stall check) until killed
    )
    # The algorithm finishes with the other runner, so the SIGKILL (logged when it happened) fails nothing:
    # fit returns, or, when the run's only rollout failed, says so.
    if status == "failed":
        with pytest.raises(agl.RolloutsFailedError, match=r"attempt unresponsive"):
            trainer.fit(SelfKilling(), [])
    else:
        trainer.fit(SelfKilling(), [])
    assert outcome["rollout"].status == status
    assert [a.status for a in outcome["attempts"]] == attempts


async def test_a_progress_line_says_what_the_algorithm_is_doing() -> None:
    store = RunStore(InMemoryLightningStore(), "run")
    phase = "learner update: 2/4 micro-batches, 310 tokens/s"
    progress = RunProgress(store, algorithm_name="GRPO", phase=lambda: phase)
    await store.start_rollout(input=0, mode="train")
    await progress.refresh()
    assert progress.line().endswith(
        "train 0/1 done; 1 running, 0 queued; GRPO: learner update: 2/4 micro-batches, 310 tokens/s"
    )
    phase = ""
    assert progress.line().endswith("; 1 running, 0 queued")


def test_a_phase_that_fails_to_describe_itself_leaves_the_line_alone() -> None:
    def broken() -> str:
        raise RuntimeError("no learner yet")

    progress = RunProgress(RunStore(InMemoryLightningStore(), "run"), algorithm_name="GRPO", phase=broken)
    assert progress.line().endswith(": GRPO has not started a rollout yet")


def test_a_schedule_names_its_running_stage_in_the_phase() -> None:
    class Stage(agl.Baseline):
        def describe_phase(self) -> str:
            return "weight swap"

    schedule = agl.Schedule([agl.Baseline(), Stage()])
    assert schedule.describe_phase() == ""
    schedule._running = schedule.stages[1]  # pyright: ignore[reportPrivateUsage]  # what run() sets
    assert schedule.describe_phase() == "Stage weight swap"
