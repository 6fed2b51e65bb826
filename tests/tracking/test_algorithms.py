"""Tracking chosen on the trainer or in a VERL config reaches the algorithm; read back from the real files.

GRPO (wandb + tensorboard) and APO (mlflow) are covered by their end-to-end tests in tests/algorithm.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import agentlightning as agl
from agentlightning.algorithm import algo
from agentlightning.tracer.otel import OtelTracer
from agentlightning.tracking import NullTracker, Tracker, TrackingConfig
from agentlightning.types import NamedResources, Rollout

from .readback import tensorboard_run


class RewardIsTask(agl.LitAgent[int]):
    async def rollout_async(self, task: int, resources: NamedResources, rollout: Rollout) -> float:
        return float(task) / 10


async def _wait_all(store: agl.LightningStore, ids: list[str]) -> list[Rollout]:
    for _ in range(1000):  # at most ~20 s
        done = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
        if len(done) == len(ids):
            return done
        await asyncio.sleep(0.02)
    raise AssertionError(f"rollouts {ids} did not finish")


def test_an_algo_function_logs_through_the_trainers_tracker(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    seen: dict[str, Any] = {}

    @algo
    async def rounds(*, store: agl.LightningStore, train_dataset: list[int], tracker: Tracker) -> None:
        seen["tracker"] = tracker
        tracker.log_config({"rounds": len(train_dataset)})
        for step, task in enumerate(train_dataset, start=1):
            rollout = await store.enqueue_rollout(input=task, mode="train")
            await _wait_all(store, [rollout.rollout_id])
            spans = list(await store.query_spans(rollout.rollout_id))
            tracker.log_metrics({"reward_mean": agl.find_final_reward(spans)}, step)

    trainer = agl.Trainer(
        algorithm=rounds,
        strategy={"type": "shm", "main_thread": "algorithm"},
        tracer=OtelTracer(),
        runner={"poll_interval": 0.05, "heartbeat_interval": 60.0},
        tracking=TrackingConfig(backends=["tensorboard"], run_name="custom", dir=str(tmp_path)),
        summary=False,
    )
    trainer.fit(RewardIsTask(), [3, 5, 8])
    run = tensorboard_run(tmp_path / "tensorboard" / "custom")
    assert run["history"]["reward_mean"] == pytest.approx({1: 0.3, 2: 0.5, 3: 0.8})
    assert '"rounds": 3' in run["config"]
    assert rounds.get_tracker().name == "none"  # the trainer finished its tracker and took it back


def test_without_tracking_an_algorithm_gets_a_null_tracker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGL_TRACKING", raising=False)

    @algo
    def noop(tracker: Tracker) -> None:
        tracker.log_metrics({"x": 1.0}, 1)

    assert isinstance(noop.get_tracker(), NullTracker)
    noop.run()


def test_verl_config_tracking_section_starts_those_backends(tmp_path: Path) -> None:
    pytest.importorskip("omegaconf", reason="the VERL config needs omegaconf (dev extra)")
    pytest.importorskip("verl", reason="the default config comes from verl (the Makefile installs verl --no-deps)")
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from agentlightning.verl.config import make_verl_tracker, merge_config

    config = merge_config(
        {
            "actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"}},
            "trainer": {"project_name": "verl-agl", "experiment_name": "calc-x"},
            "agentlightning": {"tracking": ["tensorboard"], "tracking_dir": str(tmp_path)},
        }
    )
    tracker = make_verl_tracker(config)
    for step, reward in ((1, 0.2), (2, 0.6)):  # what AgentLightningTrainer.fit logs each step
        tracker.log_metrics({"critic/score/mean": reward, "training/global_step": step}, step)
    tracker.finish()
    run = tensorboard_run(tmp_path / "tensorboard" / "calc-x")  # the run is named trainer.experiment_name
    assert '"path": "Qwen/Qwen2.5-0.5B-Instruct"' in run["config"]
    assert run["history"]["critic/score/mean"] == pytest.approx({1: 0.2, 2: 0.6})
    with pytest.raises(ValueError, match="agentlightning.tracking is invalid: unknown tracking backend 'comet'"):
        merge_config(
            {
                "actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"}},
                "agentlightning": {"tracking": ["comet"]},
            }
        )
