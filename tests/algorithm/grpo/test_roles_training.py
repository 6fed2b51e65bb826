"""Two agent roles with opposite goals, one LoRA adapter each on a shared frozen base, trained in one run.

Each rollout is a two-agent episode: the "vowel" agent writes, then the "consonant" agent writes; the
rollout's return is the vowel agent's fraction of vowels plus the consonant agent's fraction of
non-vowels, so the advantage (per rollout group, shared by both calls) rewards vowels in one role and
penalises them in the other. Both adapters start equal to the base (LoRA B is zero); a single shared
adapter would get the opposite push from each role. With one adapter per role each moves its own way.
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path
from typing import Any

import openai
import pytest
import torch

import agentlightning as agl
from agentlightning.algorithm.grpo import GRPO, GRPOConfig, GRPOLearner, RolloutTriplets, samples_from_rollouts
from agentlightning.algorithm.grpo.roles import role_of_triplet
from agentlightning.serving.server import PolicyServer
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import LLM, NamedResources, Rollout, Triplet
from tests.support.tiny_model import tiny_model

pytestmark = [pytest.mark.train, pytest.mark.slow]

TASKS, GROUP, STEPS = 4, 8, 15
ROLES = {"vowel": "^vowel-agent$", "consonant": "^consonant-agent$"}


def vowel_fraction(text: str) -> float:
    return sum(c in "aeiou" for c in text) / max(1, len(text))


async def _calls(client: openai.AsyncOpenAI, model: str, step: int, seed: int) -> list[dict[str, Any]]:
    calls = [
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"task {task}"}],
            max_tokens=6,
            n=GROUP,
            seed=seed + 1000 * step + task,
        )
        for task in range(TASKS)
    ]
    return [response.model_dump() for response in await asyncio.gather(*calls)]


def _triplet(data: dict[str, Any], choice: dict[str, Any], reward: float, metadata: dict[str, Any]) -> Triplet:
    return Triplet(
        prompt={"token_ids": data["prompt_token_ids"]},
        response={"token_ids": choice["token_ids"], "logprobs": choice["logprobs"]},
        reward=reward,
        metadata=metadata,
    )


async def _episodes(client: openai.AsyncOpenAI, step: int) -> tuple[list[RolloutTriplets], dict[str, float]]:
    # One adapter at a time: each role's TASKS x GROUP rows fill exactly one batch (reproducible runs).
    # Different seeds per role: with equal adapters and equal samples the episode return would be constant.
    vowel = await _calls(client, "policy:vowel", step, seed=0)
    consonant = await _calls(client, "policy:consonant", step, seed=500)
    rollouts: list[RolloutTriplets] = []
    scores: dict[str, list[float]] = {"vowel": [], "consonant": []}
    for task in range(TASKS):
        for a, b in zip(vowel[task]["choices"], consonant[task]["choices"], strict=True):
            a_score = vowel_fraction(a["message"]["content"] or "")
            b_score = 1.0 - vowel_fraction(b["message"]["content"] or "")
            scores["vowel"].append(a_score)
            scores["consonant"].append(b_score)
            triplets = [
                # The first role is found by its agent name, the second by the model it called.
                _triplet(vowel[task], a, a_score, {"agent_name": "vowel-agent"}),
                _triplet(consonant[task], b, b_score, {"request": {"model": "policy:consonant"}}),
            ]
            rollouts.append(RolloutTriplets(f"ro-{step}-{task}-{a['index']}", task, triplets))
    return rollouts, {role: statistics.fmean(values) for role, values in scores.items()}


def test_each_role_adapter_learns_its_own_opposite_goal() -> None:
    model, tokenizer = tiny_model(seed=0)
    base_before = {name: p.detach().clone() for name, p in model.named_parameters()}
    config = GRPOConfig(
        learning_rate=3e-2,
        micro_batch_size=32,
        device="cpu",
        lora_rank=4,
        # The tiny random model learns token preferences through the output layer: in a probe, LoRA on
        # the attention and MLP projections alone did not move its vowel fraction in 15 steps.
        lora_target_modules=["q_proj", "v_proj", "lm_head"],
        roles=ROLES,
    )
    learner = GRPOLearner(model, tokenizer, config)
    server = PolicyServer(
        learner.policy,
        tokenizer,
        model_name="policy",
        seed=0,
        max_batch_size=TASKS * GROUP,
        batch_window_s=30.0,
        always_logprobs=True,
        adapters=list(ROLES),
    )
    role_counts: list[dict[str, int]] = []

    def update(samples: list[Any]) -> dict[str, float]:
        with server.engine.exclusive():
            metrics = learner.step(samples)
        server.update_weights(learner.policy)
        return metrics

    async def train() -> list[dict[str, float]]:
        client = openai.AsyncOpenAI(base_url=server.endpoint, api_key="unused", max_retries=0)
        history = []
        for step in range(STEPS):
            rollouts, means = await _episodes(client, step)
            history.append(means)
            samples = samples_from_rollouts(rollouts, role_of=lambda t: role_of_triplet(t, ROLES))
            counts: dict[str, int] = {}
            for sample in samples:
                counts[str(sample.role)] = counts.get(str(sample.role), 0) + 1
            role_counts.append(counts)
            await asyncio.to_thread(update, samples)
        return history

    with server:
        history = asyncio.run(train())

    assert all(counts == {"vowel": TASKS * GROUP, "consonant": TASKS * GROUP} for counts in role_counts)
    start = {role: statistics.fmean(h[role] for h in history[:3]) for role in ROLES}
    end = {role: statistics.fmean(h[role] for h in history[-3:]) for role in ROLES}
    assert end["vowel"] > start["vowel"] + 0.2, history
    assert end["consonant"] > start["consonant"] + 0.1, history
    # The two roles now behave oppositely: the vowel agent writes far more vowels than the consonant agent.
    final_vowels = {"vowel": end["vowel"], "consonant": 1.0 - end["consonant"]}
    assert final_vowels["vowel"] > final_vowels["consonant"] + 0.3, history
    for name, param in learner.policy.get_base_model().named_parameters():  # type: ignore[operator]
        if "lora_" not in name:
            assert torch.equal(param, base_before[name.replace(".base_layer", "")]), name


class PlannerCoderAgent(agl.LitAgent[dict[str, Any]]):
    """A two-role rollout over the published role LLMs: the planner writes, then the coder writes."""

    async def rollout_async(self, task: dict[str, Any], resources: NamedResources, rollout: Rollout) -> float:
        texts = []
        for name in ("planner_llm", "coder_llm"):
            llm = resources[name]
            assert isinstance(llm, LLM)
            client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=8)
            response = await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": task["question"]}], **llm.sampling_parameters
            )
            texts.append(response.choices[0].message.content or "")
        return vowel_fraction(texts[0]) + 1.0 - vowel_fraction(texts[1])


@pytest.mark.parametrize("async_rollouts", [False, True], ids=["sync", "async"])
def test_fit_trains_one_adapter_per_role_from_the_published_role_llms(tmp_path: Path, async_rollouts: bool) -> None:
    model, tokenizer = tiny_model()
    config = GRPOConfig(
        group_size=4,
        batch_size=2,
        total_steps=2,
        max_new_tokens=6,
        learning_rate=3e-2,
        device="cpu",
        lora_rank=4,
        roles=["planner", "coder"],
        async_rollouts=async_rollouts,
        checkpoint_dir=str(tmp_path / "ckpt"),
    )
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    store = InMemoryLightningStore()
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=store,
        runner={"poll_interval": 0.05},
        strategy={"type": "shm", "n_runners": 2, "main_thread": "algorithm"},
    )
    trainer.fit(PlannerCoderAgent(), train_dataset=[{"question": f"question {i}"} for i in range(4)])

    assert algorithm.learner is not None and algorithm.server is not None
    resources = asyncio.run(store.get_resources_by_id("grpo-train"))
    assert resources is not None
    models = {name: r.model for name, r in resources.resources.items() if isinstance(r, LLM)}
    assert models == {"main_llm": "grpo-policy", "planner_llm": "grpo-policy:planner", "coder_llm": "grpo-policy:coder"}
    for record in algorithm.history:
        # No agent spans here: each call's role is the adapter its request named ("grpo-policy:planner").
        assert record["role_planner_samples"] == 8 and record["role_coder_samples"] == 8, record
        assert record["triplets_without_role"] == 0 and record["samples"] == 16
    # Both adapters trained, differently; the server's adapters are the learner's (shared, or swapped in).
    policy = algorithm.learner.policy
    served = dict(algorithm.server.engine.model.named_parameters())
    planner = {n: p for n, p in policy.named_parameters() if ".lora_B.planner." in n}
    coder = {n.replace(".coder.", ".planner."): p for n, p in policy.named_parameters() if ".lora_B.coder." in n}
    assert planner and all(p.abs().sum() > 0 for p in planner.values())
    assert any(not torch.equal(p, coder[n]) for n, p in planner.items())
    for name, param in policy.named_parameters():
        if ".lora_" in name:
            assert torch.equal(served[name], param), name
    # A checkpoint holds both adapters and both optimizers, and restores them.
    checkpoint = GRPOLearner.latest_checkpoint(tmp_path / "ckpt")
    assert checkpoint is not None and checkpoint.name == "step-000002"
    restored = GRPOLearner(tiny_model()[0], tokenizer, config)
    restored.load_checkpoint(checkpoint)
    again = dict(restored.policy.named_parameters())
    for name, param in policy.named_parameters():
        if ".lora_" in name:
            assert torch.equal(again[name], param), name
    for role in ("planner", "coder"):
        assert restored.role_optimizers[role].state_dict()["state"], role
