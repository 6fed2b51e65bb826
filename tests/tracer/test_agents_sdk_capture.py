"""An OpenAI Agents SDK agent with its default model (the Responses API) gives spans and triplets, zero-code."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from tests.support.openai_server import OpenAITestServer, Reply, ToolCall, scripted

agents = pytest.importorskip("agents", reason="needs the openai-agents package (dev extra)")


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    replies = [
        Reply(tool_calls=[ToolCall("get_weather", {"city": "Paris"}, id="call_w")]),
        Reply(content="Sunny, 21C."),
    ]
    with OpenAITestServer(scripted(replies), always_return_token_ids=True) as server:
        yield server


async def test_agents_sdk_run_with_a_tool_gives_one_triplet_per_model_call(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    import openai

    agents.set_tracing_disabled(True)  # the SDK's own trace export would call api.openai.com

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather of a city."""
        return f"{city}: sunny, 21C"

    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k")
    # The SDK's default provider and model class (Responses API), pointed at the loopback server.
    agents.set_default_openai_client(client, use_for_tracing=False)
    agent = agents.Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather], model="policy")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        result = await agents.Runner.run(agent, "Weather in Paris?")
    await client.close()
    assert result.final_output == "Sunny, 21C."

    spans = list(await store.query_spans(attempted.rollout_id))
    llm_spans = [span for span in spans if span.name == "openai.responses"]
    assert len(llm_spans) == 2
    second = llm_spans[1].attributes
    # The tool result the SDK sent back is part of the second prompt.
    assert any(str(v) == "Paris: sunny, 21C" for k, v in second.items() if k.startswith("gen_ai.prompt."))
    assert json.loads(str(second["gen_ai.request.tools"]))[0]["name"] == "get_weather"
    triplets = TracerTraceToTriplet().adapt(spans)
    assert len(triplets) == 2
    for triplet, served in zip(triplets, server.responses, strict=True):
        assert triplet.prompt["token_ids"] == served["prompt_token_ids"]
        assert triplet.response["token_ids"] == served["token_ids"]
    # Multi-turn token ids line up: the second prompt extends the first prompt + response.
    first_ids = triplets[0].prompt["token_ids"] + triplets[0].response["token_ids"]
    assert triplets[1].prompt["token_ids"][: len(first_ids)] == first_ids
