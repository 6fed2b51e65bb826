"""End to end: real OpenAI client calls -> OtelTracer -> InMemoryLightningStore -> adapters."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openai import AsyncOpenAI
from opentelemetry import trace as trace_api

from agentlightning.adapter import TracerTraceToTriplet, TraceToMessages
from agentlightning.emitter.reward import emit_reward
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.base import clear_active_tracer
from agentlightning.tracer.otel import OtelTracer
from tests.support.openai_server import OpenAITestServer, Reply, ToolCall, scripted

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    replies = [
        Reply(tool_calls=[ToolCall(name="get_weather", arguments={"city": "Oslo"}, id="call_1")]),
        "It is sunny in Oslo.",
        "You are welcome.",
    ]
    with OpenAITestServer(scripted(replies)) as server:
        yield server


@pytest.fixture
def store() -> InMemoryLightningStore:
    return InMemoryLightningStore()


@pytest.fixture
def tracer(store: InMemoryLightningStore) -> Iterator[OtelTracer]:
    tracer = OtelTracer()
    tracer.init_worker(0, store)
    yield tracer
    tracer.teardown_worker(0)
    clear_active_tracer()


async def run_agent(client: AsyncOpenAI) -> None:
    """A weather agent: tool call, tool result, answer (streamed), follow-up; then a reward."""
    otel = trace_api.get_tracer("weather-agent")
    token_ids = {"return_token_ids": True}
    with otel.start_as_current_span("weather-agent", attributes={"agent.name": "weather"}):
        messages: list[dict[str, object]] = [
            {"role": "system", "content": "Answer weather questions."},
            {"role": "user", "content": "Weather in Oslo?"},
        ]
        first = await client.chat.completions.create(
            model="test-model",
            messages=messages,  # type: ignore[arg-type]
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
            extra_body=token_ids,
        )
        call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
        with otel.start_as_current_span("tool.get_weather", attributes={"tool.name": "get_weather"}):
            result = "sunny"
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        stream = await client.chat.completions.create(
            model="test-model",
            messages=messages,  # type: ignore[arg-type]
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
            stream=True,
            extra_body=token_ids,
        )
        answer = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
        messages.append({"role": "assistant", "content": answer})
        messages.append({"role": "user", "content": "Thanks!"})
        await client.chat.completions.create(model="test-model", messages=messages, extra_body=token_ids)  # type: ignore[arg-type]
        emit_reward(1.0)


async def test_traced_openai_calls_become_exact_triplets(
    server: OpenAITestServer, store: InMemoryLightningStore, tracer: OtelTracer
):
    attempted = await store.start_rollout(input={"city": "Oslo"})
    client = AsyncOpenAI(base_url=server.base_url, api_key="test")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        await run_agent(client)
    await client.close()

    spans = await store.query_spans(attempted.rollout_id)
    adapter = TracerTraceToTriplet()
    triplets = adapter.adapt(spans)

    assert len(server.responses) == 3
    assert len(triplets) == 3
    for triplet, response in zip(triplets, server.responses, strict=True):
        assert triplet.prompt["token_ids"] == response["prompt_token_ids"]
        assert triplet.response["token_ids"] == response["choices"][0]["token_ids"]
        assert triplet.metadata["response_id"] == response["id"]
        assert triplet.metadata["agent_name"] == "weather"
    assert [t.reward for t in triplets] == [None, None, 1.0]
    assert triplets[0].response["raw_content"][0]["tool_calls"] == [
        {"id": "call_1", "name": "get_weather", "arguments": json.dumps({"city": "Oslo"})}
    ]
    assert triplets[1].response["raw_content"][0]["content"] == "It is sunny in Oslo."

    report = adapter.last_report
    assert report is not None
    assert report.dropped == [] and report.unmatched_rewards == []
    assert report.token_drift == []  # each turn's prompt extends the previous turn
    assert report.n_llm_spans == 3 and report.n_reward_spans == 1

    conversations = TraceToMessages().adapt(spans)
    assert len(conversations) == 3
    assert conversations[0]["messages"][-1]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    ]
    assert conversations[0]["tools"] == [WEATHER_TOOL]
    assert conversations[2]["messages"][-1] == {"role": "assistant", "content": "You are welcome."}
