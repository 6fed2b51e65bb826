"""While the algorithm waits, the run prints progress; when nothing can move any more, it fails saying why."""

from __future__ import annotations

import asyncio
import io

import pytest

import agentlightning as agl
from agentlightning.algorithm import algo
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.trainer.progress import RunProgress, format_duration
from agentlightning.trainer.run_store import RUN_METADATA_KEY, ForeignRolloutWarning, RunStore
from agentlightning.types import EnqueueRolloutRequest, NamedResources, Rollout


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


async def test_a_runner_says_once_when_it_takes_another_runs_rollout(caplog: pytest.LogCaptureFixture) -> None:
    hook = ForeignRolloutWarning("b.py 10:00")
    mine = Rollout(rollout_id="ro-1", input=1, start_time=0.0, metadata={RUN_METADATA_KEY: "b.py 10:00"})
    theirs = Rollout(rollout_id="ro-2", input=2, start_time=0.0, metadata={RUN_METADATA_KEY: "a.py 09:59"})
    untagged = Rollout(rollout_id="ro-3", input=3, start_time=0.0)
    with caplog.at_level("WARNING", logger="agentlightning.trainer.run_store"):
        for rollout in (mine, untagged, theirs, theirs):
            await hook.on_rollout_start(agent=None, runner=None, rollout=rollout)  # type: ignore[arg-type]
    (record,) = caplog.records
    assert "rollout ro-2 was enqueued by run 'a.py 09:59', not by this run ('b.py 10:00')" in record.getMessage()


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
    held = await store.start_rollout(input=1, worker_id="Worker-0")
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
