"""RFT through `Trainer.fit` on a tiny model: sample, keep the best rollouts, fine-tune on their exact tokens."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch

import agentlightning as agl
from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.algorithm.grpo import read_metrics, triplet_tokens
from agentlightning.algorithm.rft import RFT, RFTConfig
from agentlightning.store.memory import InMemoryLightningStore
from tests.support.tiny_model import tiny_model

from .agents import vowel_agent

pytestmark = [pytest.mark.train, pytest.mark.slow]

TASKS = [{"question": f"question {i}"} for i in range(4)]


def fit(algorithm: Any, store: InMemoryLightningStore, val: bool = False) -> None:
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=store,
        runner={"poll_interval": 0.05},
        strategy={"type": "shm", "n_runners": 2, "main_thread": "algorithm", "graceful_delay": 0.2},
    )
    trainer.fit(vowel_agent, train_dataset=TASKS, val_dataset=TASKS[:2] if val else None)


class RecordingRFT(RFT):
    """Keeps the rows of every supervised update, to compare them with the stored spans."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trained: list[Any] = []

    def _supervised_update(self, samples: Any) -> Any:
        self.trained.extend(samples)
        return super()._supervised_update(samples)


def _stored_tokens(store: InMemoryLightningStore, rollout_id: str) -> tuple[list[int], list[int]]:
    async def read() -> tuple[list[int], list[int]]:
        spans = await store.query_spans(rollout_id, "latest")
        [triplet] = TracerTraceToTriplet().adapt(list(spans))
        tokens = triplet_tokens(triplet)
        assert tokens is not None
        return list(tokens[0]), list(tokens[1])

    return asyncio.run(read())


def test_rft_fine_tunes_on_the_exact_tokens_of_each_groups_best_rollout(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    config = RFTConfig(
        rounds=2, tasks_per_round=2, group_size=3, max_new_tokens=6, learning_rate=3e-2, device="cpu", epochs=2
    )
    algorithm = RecordingRFT(config, model=model, tokenizer=tokenizer, metrics_path=str(tmp_path / "m.jsonl"))
    store = InMemoryLightningStore()
    fit(algorithm, store, val=True)

    rounds = [r for r in algorithm.history if "selected_rollouts" in r]
    assert [r["step"] for r in algorithm.history] == [0, 1, 2] and len(rounds) == 2
    assert "val_reward_mean" in algorithm.history[0] and "val_reward_mean" in algorithm.history[-1]
    for record in rounds:
        assert record["rollouts"] == 6 and record["rollouts_failed"] == 0
        assert 1 <= record["selected_rollouts"] <= 2 and record["groups_selected"] == record["selected_rollouts"]
        assert record["selected_reward_mean"] >= record["reward_mean"] and record["nll"] > 0
        assert record["update_skipped"] == 0.0 and record["optimizer_steps"] == 2  # one per epoch
        assert "clip_fraction" not in record and "kl" not in record
    assert [r["step"] for r in read_metrics(tmp_path / "m.jsonl")] == [0, 1, 2]
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())

    # Rollouts are tagged as RFT's, rounds apart; every trained row is a selected rollout's tokens, unchanged.
    rollouts = {r.rollout_id: r for r in asyncio.run(store.query_rollouts())}
    train = [r for r in rollouts.values() if r.mode == "train"]
    assert sorted({(r.metadata or {})["rft_round"] for r in train}) == [0, 1] and len(train) == 12
    assert len(algorithm.trained) == sum(r["rows_trained"] for r in rounds)
    for row in algorithm.trained:
        assert rollouts[row.rollout_id].mode == "train"
        prompt, response = _stored_tokens(store, row.rollout_id)
        assert (row.prompt_ids, row.response_ids) == (prompt, response)
        siblings = [
            r
            for r in train
            if (r.metadata or {})["rft_round"] == (rollouts[row.rollout_id].metadata or {})["rft_round"]
            and (r.metadata or {})["rft_group"] == (rollouts[row.rollout_id].metadata or {})["rft_group"]
        ]
        assert len(siblings) == 3


def test_rft_with_lora_and_a_threshold_nobody_reaches_skips_the_update() -> None:
    model, tokenizer = tiny_model()
    base = {name: p.detach().clone() for name, p in model.named_parameters()}
    algorithm = agl.RFT(
        model=model,
        tokenizer=tokenizer,
        rounds=1,
        tasks_per_round=2,
        group_size=2,
        max_new_tokens=4,
        device="cpu",
        lora_rank=4,
        lora_target_modules=["q_proj", "v_proj"],
        selection="threshold",
        reward_threshold=2.0,  # a vowel fraction never reaches 2
    )
    fit(algorithm, InMemoryLightningStore())
    [record] = algorithm.history
    assert record["selected_rollouts"] == 0 and record["update_skipped"] == 1.0
    assert algorithm.learner is not None and algorithm.learner.uses_lora
    policy = algorithm.get_trained_policy()
    assert policy is not None and policy.trained_by == "RFT" and policy.source == "a loaded model"
    # Nothing was trained: the merged policy is the base model, unchanged.
    assert all(torch.equal(base[n], p) for n, p in policy.model.named_parameters())


@pytest.mark.parametrize(("threshold", "rounds"), [(2.0, 3), (0.0, 1)])
def test_a_round_that_keeps_nothing_samples_the_next_tasks_within_max_empty_rounds(
    threshold: float, rounds: int
) -> None:
    model, tokenizer = tiny_model()
    algorithm = agl.RFT(
        model=model,
        tokenizer=tokenizer,
        rounds=1,
        max_empty_rounds=2,
        tasks_per_round=2,
        group_size=2,
        max_new_tokens=4,
        device="cpu",
        selection="threshold",
        reward_threshold=threshold,  # 2.0: no vowel fraction reaches it; 0.0: every rollout does
    )
    store = InMemoryLightningStore()
    fit(algorithm, store)

    # 2.0: every round was empty, so the run sampled 1 + max_empty_rounds; 0.0: the first round trained.
    assert len(algorithm.history) == rounds and algorithm.empty_rounds == (3 if threshold == 2.0 else 0)
    assert [r["update_skipped"] for r in algorithm.history] == [float(threshold == 2.0)] * rounds
    # Each round sampled its own tasks: the next slice of the shuffled training set.
    tasks_by_round: dict[int, set[str]] = {}
    for rollout in asyncio.run(store.query_rollouts()):
        tasks_by_round.setdefault((rollout.metadata or {})["rft_round"], set()).add(rollout.input["question"])
    assert sorted(tasks_by_round) == list(range(rounds))
    if rounds == 3:
        assert tasks_by_round[0] != tasks_by_round[1]
    with pytest.raises(ValueError, match="max_empty_rounds=-1"):
        RFTConfig(max_empty_rounds=-1)
