"""Real OpenAI clients against the loopback server: every chat completion becomes one stored LLM span."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agentlightning.instrumentation.openai import (
    instrument_openai,
    is_openai_instrumented,
    is_openai_wrapper,
    uninstrument_openai,
)
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import Span
from tests.support.openai_server import ErrorReply, OpenAITestServer, Reply, ToolCall, scripted

LLM_CALL_MATCH = re.compile(r"openai\.chat\.completion")

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]

MESSAGES: list[Any] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]

SAMPLING: dict[str, Any] = {"temperature": 0.25, "top_p": 0.9, "max_tokens": 64, "seed": 7, "stop": ["\n\n"]}


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    replies = [
        Reply(content="It is sunny in Paris."),
        Reply(content="Checking.", tool_calls=[ToolCall(name="get_weather", arguments={"city": "Rome"}, id="call_2")]),
    ]
    with OpenAITestServer(scripted(replies)) as server:
        yield server


async def _llm_spans(store: InMemoryLightningStore, rollout_id: str) -> list[Span]:
    spans = list(await store.query_spans(rollout_id))
    assert all(a.sequence_id < b.sequence_id for a, b in zip(spans, spans[1:], strict=False))
    return [s for s in spans if LLM_CALL_MATCH.search(s.name)]


def _assert_request_attributes(span: Span, *, model: str = "policy-model") -> None:
    attrs = span.attributes
    assert span.name == "openai.chat.completion"
    assert attrs["gen_ai.system"] == "openai"
    assert attrs["gen_ai.request.model"] == model
    assert attrs["gen_ai.request.temperature"] == 0.25
    assert attrs["gen_ai.request.top_p"] == 0.9
    assert attrs["gen_ai.request.max_tokens"] == 64
    assert attrs["gen_ai.request.seed"] == 7
    assert attrs["gen_ai.request.stop"] == ["\n\n"]
    assert attrs["gen_ai.prompt.0.role"] == "system"
    assert attrs["gen_ai.prompt.0.content"] == "You are terse."
    assert attrs["gen_ai.prompt.1.content"] == "Weather in Paris?"
    assert attrs["gen_ai.prompt.2.role"] == "assistant"
    assert attrs["gen_ai.prompt.2.tool_calls.0.id"] == "call_1"
    assert attrs["gen_ai.prompt.2.tool_calls.0.name"] == "get_weather"
    assert attrs["gen_ai.prompt.2.tool_calls.0.arguments"] == '{"city": "Paris"}'
    assert attrs["gen_ai.prompt.3.role"] == "tool"
    assert attrs["gen_ai.prompt.3.tool_call_id"] == "call_1"
    assert attrs["gen_ai.request.functions.0.name"] == "get_weather"
    assert attrs["gen_ai.request.functions.0.description"] == "Weather of a city"
    assert json.loads(str(attrs["gen_ai.request.functions.0.parameters"]))["properties"]["city"] == {"type": "string"}


def _assert_response_attributes(span: Span, served: dict[str, Any]) -> None:
    """The span's response attributes equal what the server actually returned."""
    attrs = span.attributes
    choice = served["choices"][0]
    assert attrs["gen_ai.response.id"] == served["id"]
    assert attrs["gen_ai.response.model"] == served["model"]
    assert attrs["gen_ai.completion.0.role"] == "assistant"
    assert attrs.get("gen_ai.completion.0.content") == choice["message"]["content"]
    assert attrs["gen_ai.completion.0.finish_reason"] == choice["finish_reason"]
    for j, call in enumerate(choice["message"].get("tool_calls") or []):
        assert attrs[f"gen_ai.completion.0.tool_calls.{j}.id"] == call["id"]
        assert attrs[f"gen_ai.completion.0.tool_calls.{j}.name"] == call["function"]["name"]
        assert attrs[f"gen_ai.completion.0.tool_calls.{j}.arguments"] == call["function"]["arguments"]
    assert attrs["gen_ai.usage.prompt_tokens"] == served["usage"]["prompt_tokens"]
    assert attrs["gen_ai.usage.completion_tokens"] == served["usage"]["completion_tokens"]
    assert attrs["gen_ai.usage.total_tokens"] == served["usage"]["total_tokens"]
    assert attrs["prompt_token_ids"] == served["prompt_token_ids"]
    assert attrs["response_token_ids"] == choice["token_ids"]


def _create_kwargs() -> dict[str, Any]:
    return {
        "model": "policy-model",
        "messages": MESSAGES,
        "tools": TOOLS,
        **SAMPLING,
        "extra_body": {"return_token_ids": True},
    }


async def test_sync_client_call_becomes_one_llm_span(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        first = client.chat.completions.create(**_create_kwargs())
        second = client.chat.completions.create(**_create_kwargs())
    assert first.choices[0].message.content == "It is sunny in Paris."
    assert second.choices[0].message.tool_calls is not None

    spans = await _llm_spans(store, attempted.rollout_id)
    assert len(spans) == 2
    for span, served in zip(spans, server.responses, strict=True):
        _assert_request_attributes(span)
        _assert_response_attributes(span, served)
    assert spans[1].attributes["gen_ai.completion.0.tool_calls.0.arguments"] == '{"city": "Rome"}'


async def test_async_client_call_becomes_one_llm_span(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        for _ in range(2):
            await client.chat.completions.create(**_create_kwargs())
    spans = await _llm_spans(store, attempted.rollout_id)
    assert len(spans) == 2
    for span, served in zip(spans, server.responses, strict=True):
        _assert_request_attributes(span)
        _assert_response_attributes(span, served)
    await client.close()


async def test_streamed_sync_call_accumulates_content_tool_calls_usage_and_token_ids(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    received: list[str] = []
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        for _ in range(2):
            stream = client.chat.completions.create(
                **_create_kwargs(), stream=True, stream_options={"include_usage": True}
            )
            assert isinstance(stream, openai.Stream)
            received.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
    assert received == ["It is sunny in Paris.", "Checking."]
    spans = await _llm_spans(store, attempted.rollout_id)
    assert len(spans) == 2
    for span, served in zip(spans, server.responses, strict=True):
        _assert_request_attributes(span)
        _assert_response_attributes(span, served)
        assert span.attributes["gen_ai.request.stream"] is True


async def test_streamed_async_call_accumulates_content_tool_calls_usage_and_token_ids(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        for _ in range(2):
            stream = await client.chat.completions.create(
                **_create_kwargs(), stream=True, stream_options={"include_usage": True}
            )
            assert isinstance(stream, openai.AsyncStream)
            async for _chunk in stream:
                pass
    spans = await _llm_spans(store, attempted.rollout_id)
    assert len(spans) == 2
    for span, served in zip(spans, server.responses, strict=True):
        _assert_request_attributes(span)
        _assert_response_attributes(span, served)
    await client.close()


async def test_logprobs_are_recorded_as_json(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True)
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True, stream=True
        )
        for _ in stream:
            pass
    spans = await _llm_spans(store, attempted.rollout_id)
    for span, served in zip(spans, server.responses, strict=True):
        logprobs = json.loads(str(span.attributes["logprobs.content"]))
        assert [e["token"] for e in logprobs] == [e["token"] for e in served["choices"][0]["logprobs"]["content"]]
        assert [e["logprob"] for e in logprobs] == [e["logprob"] for e in served["choices"][0]["logprobs"]["content"]]


async def test_raw_response_and_stream_helper_are_captured(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        raw = client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "a"}])
        assert raw.parse().choices[0].message.content == "It is sunny in Paris."
        with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "b"}]) as stream:
            final = stream.get_final_completion()
        assert final.choices[0].message.content == "Checking."
    spans = await _llm_spans(store, attempted.rollout_id)
    assert [s.attributes["gen_ai.prompt.0.content"] for s in spans] == ["a", "b"]
    assert [s.attributes["gen_ai.completion.0.content"] for s in spans] == ["It is sunny in Paris.", "Checking."]


async def test_stream_closed_early_still_ends_its_span(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
        for _ in stream:
            break
        stream.close()
    (span,) = await _llm_spans(store, attempted.rollout_id)
    assert span.attributes["gen_ai.request.model"] == "m"
    assert span.end_time is not None


async def test_server_errors_are_recorded_on_the_span(tracer: OtelTracer, store: InMemoryLightningStore) -> None:
    with OpenAITestServer(lambda request: ErrorReply(400, "bad prompt")) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        attempted = await store.start_rollout(input="q")
        async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
            with pytest.raises(openai.BadRequestError):
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    (span,) = await _llm_spans(store, attempted.rollout_id)
    assert span.status.status_code == "ERROR"
    assert span.attributes["exception.type"] == "BadRequestError"


async def test_instrumentation_is_idempotent_and_reversible(
    store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    from openai.resources.chat.completions import AsyncCompletions, Completions

    tracer = OtelTracer(instrument_openai=False)  # would re-install the instrumentation on trace_context
    tracer.init_worker(0, store)
    client = openai.OpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    wrapped = Completions.create
    assert instrument_openai() and Completions.create is wrapped
    uninstrument_openai()
    try:
        assert not is_openai_instrumented()
        assert not is_openai_wrapper(Completions.__dict__["create"])
        assert not is_openai_wrapper(AsyncCompletions.__dict__["create"])
        async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], extra_body={"return_token_ids": True}
            )
        # Other instrumentations (e.g. AgentOps, when installed) may still record the call, never with our token ids.
        assert all("prompt_token_ids" not in s.attributes for s in await _llm_spans(store, attempted.rollout_id))
    finally:
        instrument_openai()
        tracer.teardown_worker(0)
    assert is_openai_instrumented() and is_openai_wrapper(Completions.__dict__["create"])


async def test_instrumentation_stays_outermost_when_another_library_wraps_later(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    from openai.resources.chat.completions import Completions

    calls: list[str] = []
    ours = Completions.__dict__["create"]

    def foreign_wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append("foreign")
        return ours(self, *args, **kwargs)

    Completions.create = foreign_wrapper  # type: ignore[method-assign]
    try:
        instrument_openai()
        outermost = Completions.__dict__["create"]
        assert is_openai_wrapper(outermost) and outermost.__agentlightning_wrapped__ is foreign_wrapper
        client = openai.OpenAI(base_url=server.base_url, api_key="test")
        attempted = await store.start_rollout(input="q")
        async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
            client.chat.completions.create(**_create_kwargs())
        (span,) = await _llm_spans(store, attempted.rollout_id)
        _assert_response_attributes(span, server.responses[0])
        assert calls == ["foreign"]
    finally:
        uninstrument_openai()
        Completions.create = ours  # type: ignore[method-assign]
        instrument_openai()
    assert Completions.__dict__["create"] is ours


async def test_a_call_already_wrapped_by_another_instrumentation_enriches_its_span(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    """When e.g. AgentOps wraps `create` outside ours, its span gets our attributes; no second span."""
    client = openai.OpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    otel = tracer.tracer_provider.get_tracer("outer-instrumentation")  # type: ignore[union-attr]
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        with otel.start_as_current_span("openai.chat.completion"):
            client.chat.completions.create(**_create_kwargs())
    (span,) = await _llm_spans(store, attempted.rollout_id)
    _assert_request_attributes(span)
    _assert_response_attributes(span, server.responses[0])


async def test_messages_given_as_a_generator_still_reach_the_server(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        messages: list[Any] = [{"role": "user", "content": "gen"}]
        client.chat.completions.create(model="m", messages=(m for m in messages))
    assert server.requests[0]["messages"] == [{"role": "user", "content": "gen"}]
    (span,) = await _llm_spans(store, attempted.rollout_id)
    assert span.attributes["gen_ai.prompt.0.content"] == "gen"
