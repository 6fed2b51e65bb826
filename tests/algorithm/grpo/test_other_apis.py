"""GRPO trains agents that speak the Responses API (the OpenAI Agents SDK's default) or Anthropic Messages,
straight against the policy server (`agl serve`'s server), with no proxy in between."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest
from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.algorithm.grpo import GRPO, GRPOConfig
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import LLM
from tests.support.tiny_model import tiny_model

agents = pytest.importorskip("agents", reason="needs the openai-agents package (dev extra)")

pytestmark = [pytest.mark.train, pytest.mark.slow]


def vowel_fraction(text: str) -> float:
    return sum(c in "aeiou" for c in text) / max(1, len(text))


async def agents_sdk_agent(task: dict[str, Any], llm: LLM) -> float:
    """An Agents SDK agent on the SDK's default model class (OpenAIResponsesModel: the Responses API)."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    provider = agents.OpenAIProvider(openai_client=client)  # the default provider; Responses API by default
    agent = agents.Agent(name="vowels", instructions="Answer.", model=llm.model)
    settings = agents.ModelSettings(temperature=llm.sampling_parameters.get("temperature"), max_tokens=6)
    agent = agent.clone(model_settings=settings)
    result = await agents.Runner.run(agent, task["question"], run_config=agents.RunConfig(model_provider=provider))
    await client.close()
    return vowel_fraction(str(result.final_output))


async def anthropic_agent(task: dict[str, Any], llm: LLM) -> float:
    client = anthropic.AsyncAnthropic(base_url=llm.endpoint.removesuffix("/v1"), api_key="unused", max_retries=0)
    message = await client.messages.create(
        model=llm.model,
        messages=[{"role": "user", "content": task["question"]}],
        max_tokens=6,
        extra_body={"temperature": llm.sampling_parameters.get("temperature", 1.0)},
    )
    await client.close()
    return vowel_fraction("".join(block.text for block in message.content if block.type == "text"))


@agl.rollout
async def two_api_agent(task: dict[str, Any], llm: LLM) -> float:
    """Half the tasks through the Agents SDK (Responses API), half through an Anthropic client (Messages API)."""
    agent = agents_sdk_agent if task["api"] == "responses" else anthropic_agent
    return await agent(task, llm)


def test_one_grpo_step_on_the_sampled_tokens_and_logprobs_of_both_apis() -> None:
    agents.set_tracing_disabled(True)  # the SDK's own trace export would call api.openai.com
    model, tokenizer = tiny_model(eos_bias=8.0)  # answers end on their own: the SDK fails a length-cut one
    config = GRPOConfig(group_size=2, batch_size=2, total_steps=1, max_new_tokens=6, learning_rate=3e-2, device="cpu")
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    store = InMemoryLightningStore()
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=store,
        runner={"poll_interval": 0.05},
        strategy={"type": "shm", "n_runners": 2, "main_thread": "algorithm"},
    )
    trainer.fit(
        two_api_agent,
        train_dataset=[{"question": "question 0", "api": "responses"}, {"question": "question 1", "api": "messages"}],
    )
    record = algorithm.history[-1]
    assert record["step"] == 1 and record["rollouts"] == 4 and record["rollouts_failed"] == 0
    # Every call reached the learner with the server's token ids and sampling-time logprobs.
    assert record["triplets_skipped"] == 0 and record["old_logprobs_recomputed"] == 0
    assert record["weights_version"] == 1
    spans = [
        span
        for rollout in asyncio.run(store.query_rollouts()).items
        for span in asyncio.run(store.query_spans(rollout.rollout_id))
    ]
    assert {"openai.responses", "anthropic.messages"} <= {span.name for span in spans}
