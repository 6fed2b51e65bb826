"""`Trainer.fit` ends with a short summary: rollouts by status, mean reward per mode, where the store is."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import agentlightning as agl
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.store.sqlite import SqliteLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.trainer.summary import describe_store, summarize_run
from agentlightning.types import NamedResources, Rollout


class RewardIsTask(agl.LitAgent[float]):
    """Returns the task as its reward; a negative task raises, so the rollout fails."""

    async def rollout_async(self, task: float, resources: NamedResources, rollout: Rollout) -> float:
        if task < 0:
            raise ValueError("negative task")
        return float(task)


def _trainer(**kwargs: Any) -> agl.Trainer:
    return agl.Trainer(
        algorithm=agl.Baseline(),
        strategy={"type": "shm", "main_thread": "algorithm", "n_runners": 1},
        tracer=OtelTracer(),
        runner={"poll_interval": 0.05, "heartbeat_interval": 60.0},
        **kwargs,
    )


def test_fit_prints_counts_rewards_per_mode_and_the_store(capsys: pytest.CaptureFixture[str]) -> None:
    trainer = _trainer()
    trainer.fit(RewardIsTask(), train_dataset=[1.0, 0.0, -1.0], val_dataset=[0.5, 0.25])
    summary = trainer.last_summary
    assert summary is not None
    assert (summary.succeeded, summary.failed) == (4, 1)
    assert [(r.mode, r.count) for r in summary.rewards] == [("train", 2), ("val", 2)]
    assert summary.rewards[0].mean == pytest.approx(0.5) and summary.rewards[1].mean == pytest.approx(0.375)
    out = capsys.readouterr().out
    assert "5 rollouts: 4 succeeded, 1 failed" in out
    assert "mean reward: train 0.500 (2 rollouts), val 0.375 (2 rollouts)" in out
    assert "  failed: 1 x ValueError: negative task" in out  # the failed one is counted by its error
    assert "reported no reward" not in out
    assert "InMemoryLightningStore, kept in this process only" in out


def test_summary_can_be_turned_off_and_names_a_sqlite_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / "runs.db")
    trainer = _trainer(store=SqliteLightningStore(path), summary=False)
    trainer.fit(RewardIsTask(), train_dataset=[1.0])
    assert capsys.readouterr().out == ""
    assert trainer.last_summary is not None and trainer.last_summary.succeeded == 1
    assert (
        trainer.last_summary.store
        == f"SqliteLightningStore at {path} (browse it: agl store --backend sqlite --path {path})"
    )


async def test_only_rollouts_of_this_run_are_counted() -> None:
    store = InMemoryLightningStore()
    old = await store.enqueue_rollout(input=1)
    await store.update_rollout(old.rollout_id, status="failed")
    started = time.time()
    fresh = await store.start_rollout(input=2, mode="train")
    await store.update_attempt(fresh.rollout_id, fresh.attempt.attempt_id, status="succeeded")
    summary = await summarize_run(store, started_at=started, store_description=describe_store(store))
    assert summary.rollouts_by_status == {"succeeded": 1}
    assert summary.rewards == [] and summary.without_reward == 1
