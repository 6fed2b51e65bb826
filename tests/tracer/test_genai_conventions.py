"""GenAI conventions out: with `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental` our LLM spans also
carry today's GenAI names (v0.3 names kept), token ids under `agentlightning.gen_ai.*`; and a span carrying
only the new names adapts to the same triplet."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import Span
from tests.support.openai_server import OpenAITestServer, Reply, scripted

from .test_openai_capture import MESSAGES, TOOLS

V03_ONLY = ("gen_ai.prompt.", "gen_ai.completion.", "prompt_token_ids", "response_token_ids", "logprobs.")


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(scripted([Reply(content="It is sunny."), Reply(content="Again.")])) as running:
        yield running


async def _one_call(tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer) -> Span:
    client = openai.OpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        client.chat.completions.create(
            model="policy-model",
            messages=MESSAGES,
            tools=TOOLS,
            logprobs=True,
            extra_body={"return_token_ids": True},
        )
    spans = [s for s in await store.query_spans(attempted.rollout_id) if s.name == "openai.chat.completion"]
    assert len(spans) == 1
    return spans[0]


async def test_opted_in_spans_carry_the_latest_genai_names_next_to_the_v03_ones(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "http,gen_ai_latest_experimental")
    span = await _one_call(tracer, store, server)
    attrs = span.attributes
    served = server.responses[-1]
    # v0.3 names stay.
    assert attrs["gen_ai.system"] == "openai" and attrs["gen_ai.prompt.1.content"] == "Weather in Paris?"
    assert attrs["prompt_token_ids"] == served["prompt_token_ids"]
    # Today's names.
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "policy-model"
    assert attrs["gen_ai.usage.input_tokens"] == served["usage"]["prompt_tokens"]
    assert attrs["gen_ai.usage.output_tokens"] == served["usage"]["completion_tokens"]
    assert attrs["gen_ai.response.finish_reasons"] == ["stop"]
    assert json.loads(str(attrs["gen_ai.input.messages"])) == [
        {"role": "system", "parts": [{"type": "text", "content": "You are terse."}]},
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "sunny"}]},
    ]
    assert json.loads(str(attrs["gen_ai.output.messages"])) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "It is sunny."}], "finish_reason": "stop"}
    ]
    # Token ids: the documented extension.
    assert attrs["agentlightning.gen_ai.prompt_token_ids"] == served["prompt_token_ids"]
    assert attrs["agentlightning.gen_ai.response_token_ids"] == served["choices"][0]["token_ids"]
    assert attrs["agentlightning.gen_ai.token_ids_source"] == "recorded"
    assert "agentlightning.gen_ai.logprobs" in attrs

    # A reader that knows only the new names gets the same triplet.
    new_only = span.model_copy(update={"attributes": {k: v for k, v in attrs.items() if not k.startswith(V03_ONLY)}})
    (full,) = TracerTraceToTriplet().adapt([span])
    (latest,) = TracerTraceToTriplet().adapt([new_only])
    assert (
        latest.prompt["token_ids"] == full.prompt["token_ids"]
        and latest.response["token_ids"] == full.response["token_ids"]
    )
    assert latest.response["logprobs"]["content"] == full.response["logprobs"]["content"]
    assert [m["role"] for m in latest.prompt["raw_content"]] == ["system", "user", "assistant", "tool"]
    assert latest.prompt["raw_content"][2]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    assert latest.response["raw_content"][0]["content"] == "It is sunny."


async def test_without_the_opt_in_spans_keep_only_the_v03_names(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    attrs = (await _one_call(tracer, store, server)).attributes
    assert "gen_ai.system" in attrs and "gen_ai.prompt.0.content" in attrs
    assert not any(k in attrs for k in ("gen_ai.provider.name", "gen_ai.input.messages", "gen_ai.operation.name"))
