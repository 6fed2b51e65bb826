"""A short end-to-end GRPO run without the trainer: policy server + learner + a toy reward over HTTP.

The policy is rewarded for the fraction of vowels in what it writes; with a fixed seed the reward must
clearly improve within a few seconds of CPU training.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

import openai
import pytest

from agentlightning.algorithm.grpo import GRPOConfig, GRPOLearner, RolloutTriplets, samples_from_rollouts
from agentlightning.serving.server import PolicyServer
from agentlightning.types import Triplet
from tests.support.tiny_model import tiny_model

pytestmark = [pytest.mark.train, pytest.mark.slow]

TASKS, GROUP, STEPS = 4, 8, 15


def vowel_fraction(text: str) -> float:
    return sum(c in "aeiou" for c in text) / max(1, len(text))


async def _collect(client: openai.AsyncOpenAI, step: int) -> tuple[list[RolloutTriplets], list[float]]:
    calls = [
        client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": f"task {task}"}],
            max_tokens=6,
            n=GROUP,
            seed=1000 * step + task,
        )
        for task in range(TASKS)
    ]
    rollouts, rewards = [], []
    for task, response in enumerate(await asyncio.gather(*calls)):
        data: dict[str, Any] = response.model_dump()
        for choice in data["choices"]:
            reward = vowel_fraction(choice["message"]["content"] or "")
            rewards.append(reward)
            triplet = Triplet(
                prompt={"token_ids": data["prompt_token_ids"]},
                response={"token_ids": choice["token_ids"], "logprobs": choice["logprobs"]},
                reward=reward,
            )
            rollouts.append(RolloutTriplets(f"ro-{step}-{task}-{choice['index']}", task, [triplet]))
    return rollouts, rewards


def test_reward_improves_with_a_fixed_seed() -> None:
    model, tokenizer = tiny_model(seed=0)
    learner = GRPOLearner(model, tokenizer, GRPOConfig(learning_rate=3e-2, micro_batch_size=32, device="cpu"))
    # One batch per step: all TASKS * GROUP rows are decoded together, so runs are reproducible.
    server = PolicyServer(
        learner.policy, tokenizer, seed=0, max_batch_size=TASKS * GROUP, batch_window_s=30.0, always_logprobs=True
    )

    def update(samples: list[Any]) -> None:
        with server.engine.exclusive():  # no generation while the shared weights change
            learner.step(samples)
        server.update_weights(learner.policy)

    async def train() -> list[float]:
        client = openai.AsyncOpenAI(base_url=server.endpoint, api_key="unused", max_retries=0)
        means = []
        for step in range(STEPS):
            rollouts, rewards = await _collect(client, step)
            means.append(statistics.fmean(rewards))
            samples = samples_from_rollouts(rollouts)
            assert all(s.old_logprobs is not None for s in samples)

            await asyncio.to_thread(update, samples)
        return means

    with server:
        means = asyncio.run(train())
    assert server.engine.batches_run == STEPS
    first, last = statistics.fmean(means[:3]), statistics.fmean(means[-3:])
    assert last > first + 0.15, means
