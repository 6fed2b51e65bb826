"""End to end: an agent calling a real OpenAI client against a loopback server, run by `runner.step`.

The store must end up with the LLM call as an `openai.chat.completion` span (prompt, response and token
ids) followed by the reward span, in sequence order, whether the call is sync, async or streamed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agentlightning.emitter import emit_reward, get_reward_value
from agentlightning.litagent import llm_rollout
from agentlightning.runner import LitAgentRunner
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import LLM
from tests.support.openai_server import OpenAITestServer, chat_prompt_token_ids, reply_token_ids

QUESTION = "What is the capital of France?"
ANSWER = "Paris is the capital."


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(lambda request: ANSWER, always_return_token_ids=True) as srv:
        yield srv


def _messages(task: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": task}]


@llm_rollout
def sync_agent(task: str, llm: LLM) -> None:
    client = openai.OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "dummy")
    reply = client.chat.completions.create(model=llm.model, messages=_messages(task))  # type: ignore[arg-type]
    emit_reward(1.0 if "Paris" in (reply.choices[0].message.content or "") else 0.0)


@llm_rollout
async def async_agent(task: str, llm: LLM) -> None:
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "dummy")
    reply = await client.chat.completions.create(model=llm.model, messages=_messages(task))  # type: ignore[arg-type]
    emit_reward(1.0 if "Paris" in (reply.choices[0].message.content or "") else 0.0)


@llm_rollout
async def streaming_agent(task: str, llm: LLM) -> None:
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "dummy")
    stream = await client.chat.completions.create(
        model=llm.model,
        messages=_messages(task),  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    text = ""
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    emit_reward(1.0 if "Paris" in text else 0.0)


@llm_rollout
def sync_streaming_agent(task: str, llm: LLM) -> float:
    client = openai.OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "dummy")
    stream = client.chat.completions.create(model=llm.model, messages=_messages(task), stream=True)  # type: ignore[arg-type]
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    return 1.0 if "Paris" in text else 0.0  # returned instead of emitted: the runner posts the reward span


@pytest.mark.parametrize(
    "agent",
    [sync_agent, async_agent, streaming_agent, sync_streaming_agent],
    ids=["sync", "async", "async-stream", "sync-stream-returned-reward"],
)
async def test_llm_span_then_reward_span_in_sequence_order(server: OpenAITestServer, agent: Any) -> None:
    store = InMemoryLightningStore()
    runner: LitAgentRunner[str] = LitAgentRunner(OtelTracer(), heartbeat_interval=0)
    llm = LLM(endpoint=server.base_url, model="test-model", api_key="sk-test")
    with runner.run_context(agent=agent, store=store):
        rollout = await runner.step(QUESTION, resources={"main_llm": llm}, mode="train")

    assert rollout.status == "succeeded"
    spans = list(await store.query_spans(rollout.rollout_id))
    assert [s.name for s in spans] == ["openai.chat.completion", "agentlightning.annotation"]
    assert [s.sequence_id for s in spans] == sorted(s.sequence_id for s in spans)
    assert len({s.sequence_id for s in spans}) == 2

    llm_span, reward_span = spans
    attributes = llm_span.attributes
    assert attributes["gen_ai.prompt.0.role"] == "user"
    assert attributes["gen_ai.prompt.0.content"] == QUESTION
    assert attributes["gen_ai.completion.0.content"] == ANSWER
    assert attributes["gen_ai.request.model"] == "test-model"
    assert list(attributes["prompt_token_ids"]) == chat_prompt_token_ids(_messages(QUESTION))  # type: ignore[arg-type]
    assert list(attributes["response_token_ids"]) == reply_token_ids(  # type: ignore[arg-type]
        {"role": "assistant", "content": ANSWER}
    )
    assert get_reward_value(reward_span) == 1.0
    # Both spans belong to the attempt the runner started.
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt is not None and {s.attempt_id for s in spans} == {attempt.attempt_id}
