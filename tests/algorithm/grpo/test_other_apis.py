"""GRPO trains agents that speak the Responses API (the OpenAI Agents SDK's default) or Anthropic Messages,
straight against the policy server (`agl serve`'s server), with no proxy in between."""

from __future__ import annotations

from pathlib import Path
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

TASKS = [{"question": f"question {i}"} for i in range(2)]


def vowel_fraction(text: str) -> float:
    return sum(c in "aeiou" for c in text) / max(1, len(text))


@agl.rollout
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


@agl.rollout
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


@pytest.mark.parametrize("agent", [agents_sdk_agent, anthropic_agent], ids=["responses", "messages"])
def test_one_grpo_step_on_the_sampled_tokens_and_logprobs(agent: Any, tmp_path: Path) -> None:
    agents.set_tracing_disabled(True)  # the SDK's own trace export would call api.openai.com
    model, tokenizer = tiny_model(eos_bias=8.0)  # answers end on their own: the SDK fails a length-cut one
    config = GRPOConfig(group_size=2, batch_size=2, total_steps=1, max_new_tokens=6, learning_rate=3e-2, device="cpu")
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=InMemoryLightningStore(),
        runner={"poll_interval": 0.05},
        strategy={"type": "shm", "n_runners": 2, "main_thread": "algorithm"},
    )
    trainer.fit(agent, train_dataset=TASKS)
    record = algorithm.history[-1]
    assert record["step"] == 1 and record["rollouts"] == 4 and record["rollouts_failed"] == 0
    # Every call reached the learner with the server's token ids and sampling-time logprobs.
    assert record["triplets_skipped"] == 0 and record["old_logprobs_recomputed"] == 0
    assert record["weights_version"] == 1
