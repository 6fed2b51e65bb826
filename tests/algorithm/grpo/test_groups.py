"""Async GRPO trains on complete groups only: a group with running siblings carries over; a stale group goes whole."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, Hashable, Sequence

import pytest
from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.algorithm.grpo import GRPO, GRPOConfig, Sample
from agentlightning.algorithm.grpo.groups import drop_stale_groups, drop_tied_groups
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import LLM


def test_a_group_with_a_sample_older_than_max_staleness_is_dropped_whole() -> None:
    versions = {(0, 1): [5, 3], (1, 1): [4, None]}  # slot 1 of step 0 (carried over) and slot 1 of step 1
    samples = [Sample([1], [2], 0.0, group_id=key, policy_version=v) for key, vs in versions.items() for v in vs]
    kept, stats = drop_stale_groups(samples, version=5, max_staleness=1)
    assert [(s.group_id, s.policy_version) for s in kept] == [((1, 1), 4), ((1, 1), None)]
    assert stats == {
        "staleness_0": 2.0,  # a sample without a version counts as current
        "staleness_1": 1.0,
        "staleness_2": 1.0,
        "samples_stale_dropped": 2.0,  # the current sample of (0, 1) goes with its stale sibling
        "groups_dropped_stale": 1.0,
    }
    assert drop_stale_groups(samples, version=5, max_staleness=2)[0] == samples
    with pytest.raises(ValueError, match="min_complete_groups=0"):
        GRPOConfig(min_complete_groups=0)


def test_tied_groups_are_dropped_and_a_group_with_any_advantage_is_kept_whole() -> None:
    samples = [
        Sample([1], [2], 1e-9, group_id="tied"),  # a mean of 0.1s is not exactly 0.1: rounding, still a tie
        Sample([1], [2], -1e-9, group_id="tied"),
        Sample([1], [2], 0.0, group_id="signal"),  # the middle rollout of a group with a spread
        Sample([1], [2], 1.2, group_id="signal"),
        Sample([1], [2, 3], 0.0, group_id="step-credit", token_advantages=[0.0, 0.4]),  # only a turn differs
    ]
    kept, dropped = drop_tied_groups(samples)
    assert [s.group_id for s in kept] == ["signal", "signal", "step-credit"] and dropped == 1
    assert drop_tied_groups(samples[:2]) == ([], 1)


RELEASE = threading.Event()
"""Holds the straggling task's rollouts back until the first update (set by `CarryingGRPO`)."""


@agl.rollout
async def straggling_agent(task: dict[str, Any], llm: LLM) -> float:
    """Rewards vowels; a task marked "straggle" first waits (at most 30 s) for `RELEASE`."""
    deadline = time.monotonic() + 30
    while task.get("straggle") and not RELEASE.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=8)
    response = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], **llm.sampling_parameters
    )
    text = response.choices[0].message.content or ""
    return sum(c in "aeiou" for c in text) / max(1, len(text))


class CarryingGRPO(GRPO):
    """Records the groups each update trains on, and releases the straggler during the first update."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trained_groups: list[set[Hashable]] = []

    def _async_update(self, samples: Sequence[Any]) -> Any:
        self.trained_groups.append({s.group_id for s in samples})
        RELEASE.set()
        return super()._async_update(samples)


@pytest.mark.train
@pytest.mark.slow
def test_a_step_trains_its_complete_groups_and_carries_a_straggling_group_over(tmp_path: Path) -> None:
    from tests.support.tiny_model import tiny_model

    RELEASE.clear()
    model, tokenizer = tiny_model()
    config = GRPOConfig(
        group_size=2,
        batch_size=2,
        total_steps=3,
        max_new_tokens=6,
        learning_rate=3e-2,
        device="cpu",
        async_rollouts=True,
        max_staleness=1,
        min_complete_groups=1,
    )
    algorithm = CarryingGRPO(config, model=model, tokenizer=tokenizer)
    tasks: list[dict[str, Any]] = [{"question": f"question {i}"} for i in range(6)]  # one epoch: no task twice
    straggler, _task = algorithm.tasks_for_step(tasks, 0)[1]
    tasks[straggler]["straggle"] = True  # slot 1 of step 0: group (0, 1)
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=InMemoryLightningStore(),
        runner={"poll_interval": 0.05},
        # 3 runners: the straggler's 2 rollouts never hold up every runner.
        strategy={"type": "shm", "n_runners": 3, "main_thread": "algorithm"},
    )
    trainer.fit(straggling_agent, train_dataset=tasks)

    history = algorithm.history
    assert [record["step"] for record in history] == [1, 2, 3]
    # Step 1 trained on its complete group without waiting for the straggler, which it carried over.
    assert algorithm.trained_groups[0] == {(0, 0)}
    assert history[0]["groups_carried_over"] >= 1
    # A later step trained on it (groups keyed by (step, slot): never mixed with slot 1 of step 2), or dropped it.
    later = set().union(*algorithm.trained_groups[1:])
    assert (0, 1) in later or sum(r["groups_dropped_stale"] for r in history[1:]) >= 1
    carried = 0.0
    for record in history:  # every pending group is trained on, dropped, or carried over
        used = record["groups_trained"] + record["groups_dropped_stale"] + record["groups_failed"]
        assert record["groups_carried_in"] == carried
        assert record["groups_carried_in"] + config.batch_size == used + record["groups_carried_over"]
        assert record["groups_trained"] >= 1 and record["groups_failed"] == 0 and record["rollouts_failed"] == 0
        assert record["rollouts"] == config.group_size * used
        carried = record["groups_carried_over"]


class CrashingGRPO(GRPO):
    """Dies in the update of step 2, after that step's groups were complete (a crash mid-training)."""

    def _async_update(self, samples: Sequence[Any]) -> Any:
        assert self.learner is not None
        if self.learner.global_step == 1:
            raise RuntimeError("simulated crash")
        return super()._async_update(samples)


@pytest.mark.train
@pytest.mark.slow
def test_an_async_run_resumes_from_the_checkpoint_with_the_interrupted_steps_groups(tmp_path: Path) -> None:
    from tests.support.tiny_model import tiny_model

    store = InMemoryLightningStore()
    tasks = [{"question": f"question {i}"} for i in range(4)]
    values: dict[str, Any] = {"group_size": 2, "batch_size": 2, "total_steps": 2, "max_new_tokens": 6}
    config = GRPOConfig(**values, device="cpu", async_rollouts=True, checkpoint_dir=str(tmp_path / "ckpt"))

    def fit(algorithm: GRPO) -> None:
        strategy = {"type": "shm", "n_runners": 2, "main_thread": "algorithm"}
        trainer = agl.Trainer(algorithm=algorithm, store=store, runner={"poll_interval": 0.05}, strategy=strategy)
        trainer.fit(straggling_agent, train_dataset=tasks)

    def step_two_rollouts() -> set[str]:
        rollouts = asyncio.run(store.query_rollouts())
        return {r.rollout_id for r in rollouts if (r.metadata or {}).get("grpo_step") == 1}

    model, tokenizer = tiny_model()
    with pytest.raises(Exception, match="simulated crash"):
        fit(CrashingGRPO(config, model=model, tokenizer=tokenizer))
    before = step_two_rollouts()
    assert len(before) == 4

    model, tokenizer = tiny_model(seed=5)
    resumed = GRPO(config, model=model, tokenizer=tokenizer)
    fit(resumed)
    [record] = resumed.history
    assert record["step"] == 2 and record["groups_trained"] == 2 and record["groups_carried_in"] == 0
    assert step_two_rollouts() == before  # the step's groups came from the store, none enqueued again
