"""Zero-code capture beyond chat completions: the OpenAI Responses API, the Anthropic SDK and LiteLLM.

Every call (plain, async, streamed) against the loopback server becomes exactly one LLM span with the
request, the output, usage and the server's token ids, and `TracerTraceToTriplet` turns each into a
triplet. Run with the default tracer of each install: `OtelTracer`, and `AgentOpsTracer` when AgentOps is
installed (the dev extra has it; without it those cases are skipped, the OtelTracer ones still run).
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.base import Tracer, clear_active_tracer
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import Span
from tests.support.openai_server import OpenAITestServer, Reply, ToolCall, scripted

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # LiteLLM would fetch its price list at import

TRACERS = ["otel", pytest.param("agentops", marks=pytest.mark.agentops)]
REPLIES = [Reply(content="It is sunny."), Reply(tool_calls=[ToolCall("get_weather", {"city": "Rome"}, id="call_9")])]
RESPONSES_TOOLS: list[Any] = [
    {"type": "function", "name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}
]
ANTHROPIC_TOOLS: list[Any] = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}]


@pytest.fixture(params=TRACERS)
async def traced(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Tracer, InMemoryLightningStore]]:
    store = InMemoryLightningStore()
    tracer: Tracer
    if request.param == "agentops":
        if importlib.util.find_spec("agentops") is None:
            pytest.skip("needs the agentops extra: pip install agentlightning[agentops]")
        from agentlightning.tracer.agentops import AgentOpsTracer

        tracer = AgentOpsTracer()
    else:
        tracer = OtelTracer()
    tracer.init_worker(0, store)
    yield tracer, store
    tracer.teardown_worker(0)
    clear_active_tracer()


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(scripted(REPLIES), always_return_token_ids=True) as server:
        yield server


async def _spans(store: InMemoryLightningStore, rollout_id: str) -> list[Span]:
    return list(await store.query_spans(rollout_id))


def _llm_spans(spans: list[Span], name: str) -> list[Span]:
    return [span for span in spans if span.name == name]


def _assert_triplets(spans: list[Span], server: OpenAITestServer) -> None:
    """One triplet per call, from exactly one LLM span per call (no second span from another layer)."""
    triplets, report = TracerTraceToTriplet().adapt_with_report(spans)
    assert len(triplets) == len(server.responses)
    assert report.n_llm_spans == len(server.responses), [span.name for span in spans]
    for triplet, served in zip(triplets, server.responses, strict=True):
        assert triplet.prompt["token_ids"] == served["prompt_token_ids"]
        assert triplet.response["token_ids"] == served["token_ids"]


# ---- OpenAI Responses API ----


async def test_responses_sync_calls_become_spans_and_triplets(
    traced: tuple[Tracer, InMemoryLightningStore], server: OpenAITestServer
) -> None:
    import openai

    tracer, store = traced
    client = openai.OpenAI(base_url=server.base_url, api_key="k")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        first = client.responses.create(model="policy", instructions="Be terse.", input="Weather?", temperature=0.5)
        items: list[Any] = [{"role": "user", "content": "Weather in Rome?"}]
        second = client.responses.create(model="policy", input=items, tools=RESPONSES_TOOLS, max_output_tokens=32)
        with client.responses.stream(model="policy", input="Again?") as stream:
            streamed = [event.type for event in stream]
    assert first.output_text == "It is sunny."
    assert streamed[-1] == "response.completed"
    every_span = await _spans(store, attempted.rollout_id)
    spans = _llm_spans(every_span, "openai.responses")
    assert len(spans) == 3
    plain, tools, _ = (span.attributes for span in spans)
    assert plain["gen_ai.request.type"] == "responses"
    assert plain["gen_ai.prompt.0.role"] == "system" and plain["gen_ai.prompt.0.content"] == "Be terse."
    assert plain["gen_ai.prompt.1.content"] == "Weather?"
    assert plain["gen_ai.request.temperature"] == 0.5
    assert plain["gen_ai.completion.0.content"] == "It is sunny."
    assert plain["gen_ai.usage.prompt_tokens"] == server.responses[0]["usage"]["input_tokens"]
    assert plain["prompt_token_ids"] == server.responses[0]["prompt_token_ids"]
    assert plain["response_token_ids"] == server.responses[0]["token_ids"]
    assert json.loads(str(tools["gen_ai.request.input_items"])) == items
    assert json.loads(str(tools["gen_ai.request.tools"]))[0]["name"] == "get_weather"
    assert tools["gen_ai.request.functions.0.name"] == "get_weather"
    assert tools["gen_ai.request.max_output_tokens"] == 32
    assert tools["gen_ai.completion.0.tool_calls.0.name"] == "get_weather"
    assert tools["gen_ai.completion.0.tool_calls.0.id"] == "call_9"
    output_items = json.loads(str(tools["gen_ai.response.output_items"]))
    assert output_items[0]["type"] == "function_call" and second.output[0].type == "function_call"
    _assert_triplets(every_span, server)


async def test_responses_async_and_streamed_calls_become_one_span_each(
    traced: tuple[Tracer, InMemoryLightningStore], server: OpenAITestServer
) -> None:
    import openai

    tracer, store = traced
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        stream = await client.responses.create(model="policy", input="Weather?", stream=True)
        deltas = [event.delta async for event in stream if event.type == "response.output_text.delta"]
        async with client.responses.stream(model="policy", input="Rome?", tools=RESPONSES_TOOLS) as managed:
            final = await managed.get_final_response()
    await client.close()
    assert "".join(deltas) == "It is sunny."
    assert final.output[0].type == "function_call"
    every_span = await _spans(store, attempted.rollout_id)
    spans = _llm_spans(every_span, "openai.responses")
    assert len(spans) == 2
    assert spans[0].attributes["gen_ai.request.stream"] is True
    assert spans[0].attributes["gen_ai.completion.0.content"] == "It is sunny."
    assert spans[1].attributes["gen_ai.completion.0.tool_calls.0.arguments"] == '{"city": "Rome"}'
    _assert_triplets(every_span, server)


# ---- Anthropic SDK ----


async def test_anthropic_plain_and_streamed_messages_become_spans_and_triplets(
    traced: tuple[Tracer, InMemoryLightningStore], server: OpenAITestServer
) -> None:
    anthropic = pytest.importorskip("anthropic", reason="needs the anthropic extra")
    tracer, store = traced
    client = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key="k")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        first = client.messages.create(
            model="claude-policy",
            max_tokens=64,
            system="Be terse.",
            messages=[{"role": "user", "content": "Weather?"}],
        )
        with client.messages.stream(
            model="claude-policy",
            max_tokens=64,
            tools=ANTHROPIC_TOOLS,
            messages=[{"role": "user", "content": [{"type": "text", "text": "Rome?"}]}],
        ) as stream:
            final = stream.get_final_message()
    assert first.content[0].text == "It is sunny."  # type: ignore[union-attr]
    assert final.stop_reason == "tool_use"
    every_span = await _spans(store, attempted.rollout_id)
    spans = _llm_spans(every_span, "anthropic.messages")
    assert len(spans) == 2
    plain, streamed = (span.attributes for span in spans)
    assert plain["gen_ai.system"] == "anthropic"
    assert plain["gen_ai.prompt.0.content"] == "Be terse." and plain["gen_ai.prompt.1.content"] == "Weather?"
    assert plain["gen_ai.request.max_tokens"] == 64
    assert plain["gen_ai.completion.0.content"] == "It is sunny."
    assert plain["gen_ai.usage.completion_tokens"] == first.usage.output_tokens
    assert streamed["gen_ai.request.functions.0.name"] == "get_weather"
    assert streamed["gen_ai.completion.0.tool_calls.0.name"] == "get_weather"
    assert json.loads(str(streamed["gen_ai.completion.0.tool_calls.0.arguments"])) == {"city": "Rome"}
    assert streamed["gen_ai.completion.0.finish_reason"] == "tool_calls"
    _assert_triplets(every_span, server)


async def test_anthropic_async_create_streamed(
    traced: tuple[Tracer, InMemoryLightningStore], server: OpenAITestServer
) -> None:
    anthropic = pytest.importorskip("anthropic", reason="needs the anthropic extra")
    tracer, store = traced
    client = anthropic.AsyncAnthropic(base_url=server.base_url.removesuffix("/v1"), api_key="k")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        stream = await client.messages.create(
            model="claude-policy", max_tokens=16, messages=[{"role": "user", "content": "Weather?"}], stream=True
        )
        text = "".join([e.delta.text async for e in stream if e.type == "content_block_delta"])  # type: ignore[union-attr]
        async with client.messages.stream(
            model="claude-policy", max_tokens=16, messages=[{"role": "user", "content": "Rome?"}]
        ) as managed:
            await managed.get_final_message()
    await client.close()
    assert text == "It is sunny."
    every_span = await _spans(store, attempted.rollout_id)
    spans = _llm_spans(every_span, "anthropic.messages")
    assert len(spans) == 2
    assert spans[0].attributes["gen_ai.completion.0.content"] == "It is sunny."
    _assert_triplets(every_span, server)


@pytest.mark.parametrize("installer", TRACERS)
async def test_a_tracer_without_client_instrumentation_records_no_client_calls(
    installer: str, server: OpenAITestServer
) -> None:
    """The client patches are process-wide; `instrument_openai=False` must hold after another tracer set them.

    Nothing below our wrapper records either: neither AgentOps' instrumentation nor the Anthropic SDK's own spans.
    """
    anthropic = pytest.importorskip("anthropic", reason="needs the anthropic extra")
    import openai

    store = InMemoryLightningStore()
    instrumenting: Tracer
    if installer == "agentops":
        if importlib.util.find_spec("agentops") is None:
            pytest.skip("needs the agentops extra: pip install agentlightning[agentops]")
        from agentlightning.tracer.agentops import AgentOpsTracer

        instrumenting = AgentOpsTracer()
    else:
        instrumenting = OtelTracer()
    instrumenting.init_worker(0, store)  # installs the OpenAI/Anthropic patches
    quiet = OtelTracer(instrument_openai=False)
    quiet.init_worker(1, store)
    messages = anthropic.AsyncAnthropic(base_url=server.base_url.removesuffix("/v1"), api_key="k", max_retries=0)
    chat = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    try:
        spans: dict[str, list[str]] = {}
        for label, tracer in (("quiet", quiet), ("instrumenting", instrumenting)):
            attempted = await store.start_rollout(input=label)
            async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
                await messages.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "a"}])
                stream = await messages.messages.create(
                    model="m", max_tokens=8, messages=[{"role": "user", "content": "b"}], stream=True
                )
                _ = [event async for event in stream]
                async with messages.messages.stream(
                    model="m", max_tokens=8, messages=[{"role": "user", "content": "c"}]
                ) as managed:
                    await managed.get_final_message()
                await chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "d"}])
                tracer.create_span("agent.step")
            spans[label] = [span.name for span in await _spans(store, attempted.rollout_id)]
    finally:
        await messages.close()
        await chat.close()
        quiet.teardown_worker(1)
        instrumenting.teardown_worker(0)
        clear_active_tracer()
    assert spans["quiet"] == ["agent.step"], "only the agent's own span: no client call recorded"
    assert {"anthropic.messages", "openai.chat.completion", "agent.step"} <= set(spans["instrumenting"])
    assert spans["instrumenting"].count("anthropic.messages") == 3


# ---- LiteLLM ----


async def test_litellm_completion_and_acompletion_streamed_or_not(
    traced: tuple[Tracer, InMemoryLightningStore], server: OpenAITestServer
) -> None:
    litellm = pytest.importorskip("litellm", reason="needs the litellm extra")
    tracer, store = traced
    attempted = await store.start_rollout(input="q")
    common: dict[str, Any] = {"model": "hosted_vllm/policy", "api_base": server.base_url, "api_key": "k"}
    messages = [{"role": "user", "content": "Weather?"}]
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        plain = litellm.completion(messages=messages, temperature=0.2, **common)
        streamed = await litellm.acompletion(messages=messages, stream=True, **common)
        chunks = [chunk async for chunk in streamed]
        sync_stream = litellm.completion(messages=messages, stream=True, **common)
        sync_chunks = list(sync_stream)
        await litellm.acompletion(messages=messages, **common)
    assert plain.choices[0].message.content == "It is sunny."
    assert chunks and sync_chunks
    every_span = await _spans(store, attempted.rollout_id)
    spans = _llm_spans(every_span, "litellm.completion")
    assert len(spans) == 4
    first = spans[0].attributes
    assert first["gen_ai.system"] == "hosted_vllm"
    assert first["gen_ai.request.model"] == "hosted_vllm/policy"
    assert first["gen_ai.request.temperature"] == 0.2
    assert first["gen_ai.completion.0.content"] == "It is sunny."
    assert spans[1].attributes["gen_ai.completion.0.tool_calls.0.name"] == "get_weather"
    for span, served in zip(spans, server.responses, strict=True):
        assert span.attributes["prompt_token_ids"] == served["prompt_token_ids"]
        assert span.attributes["response_token_ids"] == served["choices"][0]["token_ids"]
    assert len(TracerTraceToTriplet().adapt(every_span)) == 4


async def test_anthropic_stays_one_span_per_call_when_another_library_wraps_on_top(
    traced: tuple[Tracer, InMemoryLightningStore], server: OpenAITestServer
) -> None:
    """Another instrumentation wrapping `create` / `stream` after ours: re-instrumenting puts ours back on top."""
    anthropic = pytest.importorskip("anthropic", reason="needs the anthropic extra")
    import functools

    from anthropic.resources.messages import Messages

    from agentlightning.instrumentation.anthropic import instrument_anthropic

    tracer, store = traced
    instrument_anthropic()
    seen: list[str] = []
    originals = {name: Messages.__dict__[name] for name in ("create", "stream")}

    def foreign(name: str) -> Any:
        inner = originals[name]

        @functools.wraps(inner)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            seen.append(name)
            return inner(*args, **kwargs)

        return wrapper

    try:
        for name in originals:
            setattr(Messages, name, foreign(name))
        instrument_anthropic()  # what the tracer does at each trace context
        client = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key="k")
        attempted = await store.start_rollout(input="q")
        async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
            client.messages.create(model="c", max_tokens=8, messages=[{"role": "user", "content": "a"}])
            with client.messages.stream(model="c", max_tokens=8, messages=[{"role": "user", "content": "b"}]) as s:
                s.get_final_message()
    finally:
        for name, original in originals.items():
            setattr(Messages, name, original)
    assert seen == ["create"]  # the foreign create wrapper still runs (below ours); stream goes to the SDK itself
    every_span = await _spans(store, attempted.rollout_id)
    assert len(_llm_spans(every_span, "anthropic.messages")) == 2
    _assert_triplets(every_span, server)
