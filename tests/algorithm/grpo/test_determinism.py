"""`GRPOConfig(deterministic=True)`: two runs with the same seed are the same run, rollout for rollout."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import torch

import agentlightning as agl
from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.algorithm.grpo import GRPO, GRPOConfig, triplet_tokens
from agentlightning.store.memory import InMemoryLightningStore
from tests.algorithm.grpo.test_algorithm import TASKS, vowel_agent
from tests.support.tiny_model import tiny_model

pytestmark = [pytest.mark.train, pytest.mark.slow]

TIMING_SUFFIXES = ("_s", "_ms", "per_s")
"""Metrics that measure time (step time, throughput, swap waits) differ between runs, and so does the
record's wall-clock `time`; all others must not."""


def _run(tmp_path: Path) -> Tuple[GRPO, InMemoryLightningStore]:
    model, tokenizer = tiny_model(seed=0)
    config = GRPOConfig(
        group_size=4,
        batch_size=2,
        total_steps=3,
        max_new_tokens=6,
        learning_rate=3e-2,
        device="cpu",
        val_interval=1,
        val_temperature=0.7,  # sampled: the held-out pass needs content-derived seeds too
        deterministic=True,
        metrics_path=str(tmp_path / "metrics.jsonl"),
    )
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    store = InMemoryLightningStore()
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=store,
        runner={"poll_interval": 0.05},
        strategy={"type": "shm", "n_runners": 3, "main_thread": "algorithm"},
    )
    trainer.fit(vowel_agent, train_dataset=TASKS, val_dataset=TASKS[:2])
    return algorithm, store


async def _rollout_tokens(store: InMemoryLightningStore) -> Dict[Tuple[str, int, int], List[Any]]:
    """Each group's rollouts (mode, step, group) as sorted (prompt ids, response ids, logprobs) per call."""
    groups: Dict[Tuple[str, int, int], List[Any]] = {}
    for rollout in await store.query_rollouts():
        assert rollout.status == "succeeded", rollout
        meta = rollout.metadata or {}
        triplets = TracerTraceToTriplet().adapt(list(await store.query_spans(rollout.rollout_id, "latest")))
        calls = [triplet_tokens(t) for t in triplets]
        key = (str(rollout.mode), int(meta[GRPO.META_STEP]), int(meta[GRPO.META_GROUP]))
        groups.setdefault(key, []).append(calls)
    return {key: sorted(calls) for key, calls in groups.items()}


def _deterministic_metrics(history: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [{k: v for k, v in record.items() if k != "time" and not k.endswith(TIMING_SUFFIXES)} for record in history]


def test_two_deterministic_runs_with_the_same_seed_are_identical(tmp_path: Path) -> None:
    first, first_store = _run(tmp_path / "a")
    second, second_store = _run(tmp_path / "b")

    tokens = asyncio.run(_rollout_tokens(first_store))
    assert len(tokens) == 3 * 2 + 4 * 2  # 3 steps x 2 groups of train rollouts, 4 held-out passes x 2 tasks
    assert tokens == asyncio.run(_rollout_tokens(second_store))  # every call's token ids and logprobs

    metrics = _deterministic_metrics(first.history)
    assert [r["step"] for r in metrics] == [0, 1, 2, 3] and all("val_reward_mean" in r for r in metrics)
    for key in ("reward_mean", "loss", "grad_norm", "rows", "val_reward_mean"):
        assert key in metrics[-1]
    assert metrics == _deterministic_metrics(second.history)  # rewards, losses, updates, held-out results
    assert all(r["rollouts_failed"] == 0 for r in metrics[1:])

    assert first.learner is not None and second.learner is not None
    first_weights, second_weights = first.learner.policy.state_dict(), second.learner.policy.state_dict()
    assert all(torch.equal(first_weights[name], second_weights[name]) for name in first_weights)
    assert not torch.equal(first_weights["model.norm.weight"], tiny_model(seed=0)[0].state_dict()["model.norm.weight"])


def test_deterministic_mode_refuses_async_rollouts() -> None:
    with pytest.raises(ValueError, match="deterministic=True needs async_rollouts=False"):
        GRPOConfig(deterministic=True, async_rollouts=True)
