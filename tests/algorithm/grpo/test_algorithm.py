"""GRPO through `Trainer.fit`: runners call the policy server, spans become triplets, the policy trains."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.algorithm.grpo import GRPO, GRPOConfig, read_metrics
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.trainer.run_store import RunStore
from agentlightning.types import LLM, EnqueueRolloutRequest
from tests.support.tiny_model import tiny_model
from tests.tracking.readback import tensorboard_run, wandb_run

pytestmark = [pytest.mark.train, pytest.mark.slow]

TASKS = [{"question": f"question {i}"} for i in range(4)]


def vowel_fraction(text: str) -> float:
    return sum(c in "aeiou" for c in text) / max(1, len(text))


async def ask(task: dict[str, Any], llm: LLM, max_retries: int = 0) -> str:
    """The policy's answer to the task's question (retries ride out the server's 429s during a swap)."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=max_retries)
    response = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], **llm.sampling_parameters
    )
    return response.choices[0].message.content or ""


@agl.rollout
async def vowel_agent(task: dict[str, Any], llm: LLM) -> float:
    return vowel_fraction(await ask(task, llm))


def _fit(algorithm: GRPO, store: InMemoryLightningStore, val: bool = False, agent: Any = vowel_agent) -> None:
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=store,
        runner={"poll_interval": 0.05},
        strategy={"type": "shm", "n_runners": 2, "main_thread": "algorithm"},
    )
    trainer.fit(agent, train_dataset=TASKS, val_dataset=TASKS[:2] if val else None)


def _config(tmp_path: Path, **overrides: Any) -> GRPOConfig:
    values: dict[str, Any] = {
        "group_size": 4,
        "batch_size": 2,
        "total_steps": 2,
        "max_new_tokens": 6,
        "learning_rate": 3e-2,
        "device": "cpu",
        "checkpoint_dir": str(tmp_path / "ckpt"),
        **overrides,
    }
    return GRPOConfig(**values)


def test_fit_trains_with_sampling_time_logprobs_and_writes_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    model, tokenizer = tiny_model()
    algorithm = GRPO(_config(tmp_path, tracking=["wandb", "tensorboard"]), model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore(), val=True)

    steps = [record["step"] for record in algorithm.history]
    assert steps == [0, 1, 2]
    assert "val_reward_mean" in algorithm.history[0] and "val_reward_mean" in algorithm.history[-1]
    for record in algorithm.history[1:]:
        assert record["rollouts"] == 8 and record["rollouts_failed"] == 0
        # Token ids and logprobs travelled server -> tracer -> store -> adapter: nothing recomputed or skipped.
        assert record["old_logprobs_recomputed"] == 0 and record["triplets_skipped"] == 0
        assert 0.0 <= record["reward_mean"] <= 1.0
    assert algorithm.history[-1]["weights_version"] == 2
    metrics_file = tmp_path / "ckpt" / "metrics.jsonl"
    assert [json.loads(line)["step"] for line in metrics_file.read_text().splitlines()] == [0, 1, 2]
    assert (tmp_path / "ckpt" / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "ckpt" / "step-000002" / "trainer_state.pt").exists()
    # The same metrics reached the tracking backends (under <checkpoint_dir>/tracking), read back by their libraries.
    curve = {r["step"]: r["reward_mean"] for r in algorithm.history if "reward_mean" in r}
    wandb = wandb_run(tmp_path / "ckpt" / "tracking")
    assert wandb["config"]["group_size"] == 4 and wandb["config"]["tracking"] == ["wandb", "tensorboard"]
    assert wandb["history"]["reward_mean"] == pytest.approx(curve)
    assert set(wandb["history"]["val_reward_mean"]) == {0, 2}
    board = tensorboard_run(tmp_path / "ckpt" / "tracking" / "tensorboard" / "grpo")
    assert board["history"]["reward_mean"] == pytest.approx(curve) and '"batch_size": 2' in board["config"]
    # The token accounting travels the same path: every record's counts, in the file and in both backends.
    generated = {r["step"]: r["tokens/generated"] for r in algorithm.history}
    assert all(value > 0 for value in generated.values())
    assert wandb["history"]["tokens/generated"] == pytest.approx(generated)
    assert board["history"]["tokens/generated"] == pytest.approx(generated)


def test_a_policy_served_in_another_dtype_is_a_copy_synced_after_each_update(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    config = _config(tmp_path, total_steps=2, serve_dtype="bfloat16", checkpoint_dir=None)
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore())
    assert algorithm.learner is not None and algorithm.server is not None
    served, policy = algorithm.server.engine.model, algorithm.learner.policy
    assert served is not policy and next(served.parameters()).dtype == torch.bfloat16
    for record in algorithm.history:
        assert record["rollouts_failed"] == 0 and record["weight_sync_ms"] > 0
    for trained, copy in zip(policy.parameters(), served.parameters(), strict=True):
        assert torch.equal(trained.detach().to(torch.bfloat16), copy)


@agl.rollout
async def indifferent_agent(task: dict[str, Any], llm: LLM) -> float:
    """Calls the policy and rewards every answer the same: no rollout is better than its group."""
    await ask(task, llm)
    return 0.1


def test_a_step_without_signal_skips_the_update_but_counts_and_checkpoints(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    algorithm = GRPO(_config(tmp_path, skip_no_signal_updates=True), model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore(), agent=indifferent_agent)

    assert [r["step"] for r in algorithm.history] == [1, 2]
    for record in algorithm.history:
        assert record["update_skipped"] == 1.0 and record["optimizer_steps"] == 0.0 and record["samples"] == 8
        assert record["weights_version"] == 0, "no weights were published: none changed"
    assert algorithm.learner is not None and algorithm.learner.global_step == 2
    assert all(torch.equal(b, p) for b, p in zip(before, algorithm.learner.policy.parameters(), strict=True))
    assert (tmp_path / "ckpt" / "step-000002" / "trainer_state.pt").exists()


def test_a_step_with_signal_updates_when_skipping_is_on(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    algorithm = GRPO(_config(tmp_path, total_steps=1, skip_no_signal_updates=True), model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore())
    [record] = algorithm.history
    assert record["reward_std"] > 0 and record["update_skipped"] == 0.0 and record["weights_version"] == 1


@agl.rollout
async def half_tied_agent(task: dict[str, Any], llm: LLM) -> float:
    """Rewards vowels on question 0 and nothing else: the other tasks' groups all tie."""
    text = await ask(task, llm)
    return vowel_fraction(text) if task["question"] == "question 0" else 0.1


def test_drop_tied_groups_trains_only_the_groups_whose_rewards_differ(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    config = _config(tmp_path, batch_size=4, total_steps=1, drop_tied_groups=True, checkpoint_dir=None)
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore(), agent=half_tied_agent)

    [record] = algorithm.history
    # Step 1 covers all 4 tasks; only question 0's group has a reward spread (tiny-model text varies).
    assert record["rows"] == 16 and record["groups_tied_dropped"] == 3
    assert record["rows_trained"] == record["samples"] == 4 and record["update_skipped"] == 0.0


class CrashingGRPO(GRPO):
    """Dies in the update of step 2, after that step's rollouts finished (a crash mid-training)."""

    def _locked_update(self, samples: Any) -> Any:
        assert self.learner is not None
        if self.learner.global_step == 1:
            raise RuntimeError("simulated crash")
        return super()._locked_update(samples)


def test_resume_after_a_crash_reuses_the_checkpoint_and_the_rollouts_in_the_store(tmp_path: Path) -> None:
    store = InMemoryLightningStore()
    model, tokenizer = tiny_model()
    crashing = CrashingGRPO(_config(tmp_path), model=model, tokenizer=tokenizer)
    with pytest.raises(Exception, match="simulated crash"):
        _fit(crashing, store)
    assert [r["step"] for r in crashing.history] == [1]
    step_two = [r for r in asyncio.run(store.query_rollouts()) if (r.metadata or {}).get("grpo_step") == 1]
    assert len(step_two) == 8 and all(r.status == "succeeded" for r in step_two)

    model, tokenizer = tiny_model(seed=5)  # fresh weights: the checkpoint must supply them
    resumed = GRPO(_config(tmp_path), model=model, tokenizer=tokenizer)
    _fit(resumed, store)
    assert [r["step"] for r in resumed.history] == [2]
    step_two_after = [r for r in asyncio.run(store.query_rollouts()) if (r.metadata or {}).get("grpo_step") == 1]
    assert {r.rollout_id for r in step_two_after} == {r.rollout_id for r in step_two}  # reused, none added
    assert [r["step"] for r in read_metrics(tmp_path / "ckpt" / "metrics.jsonl")] == [1, 2]


def test_a_resumed_run_cancels_the_rollouts_its_predecessor_left_queued_on_a_shared_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Ctrl-C leaves rollouts queued under the old run's name; this run's runners never take them, so the
    resumed run cancels them (no wait for them), says where it resumed, and trains the next step."""
    store = InMemoryLightningStore()
    model, tokenizer = tiny_model()
    crashing = CrashingGRPO(_config(tmp_path), model=model, tokenizer=tokenizer)
    with pytest.raises(Exception, match="simulated crash"):
        _fit(crashing, store)
    tag = {GRPO.META_CHECKPOINT: str((tmp_path / "ckpt").resolve())}
    interrupted = RunStore(store, "train.py 10:00")  # the predecessor's run, as its Trainer tagged it
    leftovers = asyncio.run(
        interrupted.enqueue_many_rollouts(
            [
                EnqueueRolloutRequest(
                    input=TASKS[0], mode="train", metadata={"grpo_step": 2, "grpo_group": 0, "grpo_sample": k, **tag}
                )
                for k in range(2)
            ]
        )
    )
    other_run = asyncio.run(RunStore(store, "other.py 10:01").enqueue_rollout(input=TASKS[1], mode="train"))

    model, tokenizer = tiny_model(seed=5)
    resumed = GRPO(_config(tmp_path, total_steps=3, rollout_timeout_s=120.0), model=model, tokenizer=tokenizer)
    with caplog.at_level("WARNING", logger="agentlightning.algorithm.grpo"):
        _fit(resumed, store)
    assert [r["step"] for r in resumed.history] == [2, 3]
    assert "GRPO resumed from step 1 (checkpoint " in caplog.text
    assert "cancelled 2 rollouts the interrupted run left queued or running" in caplog.text
    statuses = {r.rollout_id: r.status for r in asyncio.run(store.query_rollouts())}
    assert [statuses[r.rollout_id] for r in leftovers] == ["cancelled", "cancelled"]
    assert statuses[other_run.rollout_id] == "queuing"  # another run's rollout is not this run's to touch


def test_tasks_for_a_step_are_a_deterministic_walk_over_shuffled_epochs(tmp_path: Path) -> None:
    algorithm = GRPO(_config(tmp_path, batch_size=3, seed=1))
    dataset = list(range(4))
    walk = [index for step in range(4) for index, _ in algorithm.tasks_for_step(dataset, step)]
    assert sorted(walk[:4]) == [0, 1, 2, 3] and sorted(walk[4:8]) == [0, 1, 2, 3]
    assert walk == [index for step in range(4) for index, _ in algorithm.tasks_for_step(dataset, step)]


def test_config_overrides_and_validation(tmp_path: Path) -> None:
    algorithm = GRPO(_config(tmp_path), group_size=8)
    assert algorithm.config.group_size == 8 and algorithm.config.batch_size == 2
    with pytest.raises(ValueError, match="group_size=0"):
        GRPOConfig(group_size=0)
    with pytest.raises(TypeError, match="unknown GRPOConfig fields"):
        GRPO(n_rollouts=3)
    with pytest.raises(ValueError, match="tokenizer"):
        GRPO(model=tiny_model()[0])
    assert type(agl.GRPO(group_size=2)).__name__ == "GRPO"


@agl.rollout
async def patient_vowel_agent(task: dict[str, Any], llm: LLM) -> float:
    """`vowel_agent` whose client retries: it rides out the policy server's 429s while weights are swapped."""
    return vowel_fraction(await ask(task, llm, max_retries=8))


def test_async_rollouts_overlap_generation_with_updates_and_swap_weights(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    config = _config(tmp_path, total_steps=3, async_rollouts=True, max_staleness=1, checkpoint_dir=None)
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore(), agent=vowel_agent)  # no retries: a swap holds calls, refuses none

    assert [record["step"] for record in algorithm.history] == [1, 2, 3]
    assert algorithm.server is not None and algorithm.learner is not None
    # The server served its own copy, swapped after every update (pause, drain, swap, resume).
    assert algorithm.server.engine.model is not algorithm.learner.policy
    assert algorithm.history[-1]["weights_version"] == 3 and len(algorithm.server.drain_times_s) == 3
    for record in algorithm.history:
        assert record["rollouts_failed"] == 0 and record["samples_stale_dropped"] == 0
        assert record["drain_time_s"] >= 0 and 0 < record["is_weight_mean"] <= config.is_ratio_cap
        # Each swap is measured: requests that arrived during it waited (none was refused).
        assert record["swap_ms"] >= record["weight_sync_ms"] and record["swap_rejected_requests"] == 0
        assert record["swap_held_requests"] >= 0 and record["swap_wait_ms"] <= record["swap_ms"]
        staleness = {k: v for k, v in record.items() if k.startswith("staleness_")}
        assert sum(staleness.values()) == record["samples"] and set(staleness) <= {"staleness_0", "staleness_1"}
    # Steps 2 and 3 used rollouts enqueued before the previous update (generated on the previous weights).
    assert "rollouts_ready_at_step_start" in algorithm.history[1]
    # Their throughput counts from that enqueue (before the previous update), not only the wait left.
    for previous, record in zip(algorithm.history[:-1], algorithm.history[1:], strict=True):
        generation_s = record["rollouts"] / record["rollouts_per_s"]
        assert generation_s >= record["rollout_wait_s"] + 0.5 * previous["train_time_s"]


def test_a_spent_time_budget_makes_the_current_step_the_last(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    config = _config(tmp_path, total_steps=5, time_budget_s=1e-3)  # spent by the time the first rollouts are in
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore(), val=True)

    assert [record["step"] for record in algorithm.history] == [0, 1]
    assert "val_reward_mean" in algorithm.history[-1], "the last step is evaluated as after total_steps"
    assert (tmp_path / "ckpt" / "step-000001" / "trainer_state.pt").exists()
    with pytest.raises(ValueError, match="time_budget_s=0"):
        _config(tmp_path, time_budget_s=0)


def test_an_async_run_out_of_time_prefetches_nothing_after_its_last_step(tmp_path: Path) -> None:
    class StepClock(GRPO):
        def elapsed_s(self) -> float:  # 100 "seconds" per finished step: the budget runs out after two
            assert self.learner is not None
            return 100.0 * self.learner.global_step

    model, tokenizer = tiny_model()
    config = _config(tmp_path, total_steps=10, async_rollouts=True, time_budget_s=150, checkpoint_dir=None)
    algorithm = StepClock(config, model=model, tokenizer=tokenizer)
    store = InMemoryLightningStore()
    _fit(algorithm, store, agent=patient_vowel_agent)

    assert [record["step"] for record in algorithm.history] == [1, 2, 3]
    rollouts = asyncio.run(store.query_rollouts())
    assert len(rollouts) == 3 * 8, "no rollouts were enqueued for a fourth step"
    assert {rollout.status for rollout in rollouts} == {"succeeded"}
