"""A multi-turn tool-using agent through the proxy: exact token ids per call, one call span per call, triplets.

Each call span also has v0.3's `raw_gen_ai_request` child (see test_raw_request_span.py); `llm_spans`
reads the call spans.

The agent uses the real `openai.AsyncOpenAI` client pointed at the routed base URL the proxy hands out;
the backend is the loopback server, whose toy tokenizer makes every expected token id computable.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from agentlightning.adapter import LlmProxyTraceToTriplet, TracerTraceToTriplet
from agentlightning.emitter import emit_reward
from agentlightning.instrumentation.openai import ChatCompletionAccumulator
from agentlightning.llm_proxy.proxy import LLMProxy
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import AttemptedRollout, Span
from tests.support.openai_server import OpenAITestServer, Reply, ToolCall, chat_prompt_token_ids, scripted

from .conftest import model_entry

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

REPLIES = [
    Reply(content="Let me look.", tool_calls=[ToolCall(name="get_weather", arguments={"city": "Paris"}, id="call_1")]),
    Reply(content="It is sunny in Paris today."),
    Reply(content=None, tool_calls=[ToolCall(name="get_weather", arguments={"city": "Rome"}, id="call_2")]),
]


async def run_agent(client: openai.AsyncOpenAI, *, stream: bool, turns: int = 3) -> list[dict[str, Any]]:
    """A small tool-calling agent; returns the responses it saw, rebuilt as unstreamed dicts."""
    messages: list[Any] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    seen: list[dict[str, Any]] = []
    for _ in range(turns):
        if stream:
            accumulator = ChatCompletionAccumulator()
            chunks = await client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, stream=True)
            async for chunk in chunks:
                accumulator.add(chunk)
            response = accumulator.to_response()
        else:
            completion = await client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
            response = completion.model_dump()
        seen.append(response)
        message = response["choices"][0]["message"]
        assistant: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            assistant["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": dict(c["function"])} for c in message["tool_calls"]
            ]
        messages.append(assistant)
        for call in message.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "sunny"})
        if not message.get("tool_calls"):
            messages.append({"role": "user", "content": "And in Rome?"})
    return seen


async def add_reward(store: InMemoryLightningStore, attempt: AttemptedRollout, value: float) -> None:
    """What the runner does with a float returned by an agent: a reward span after the agent's calls."""
    rollout_id, attempt_id = attempt.rollout_id, attempt.attempt.attempt_id
    sequence_id = await store.get_next_span_sequence_id(rollout_id, attempt_id)
    core = emit_reward(value, propagate=False)
    await store.add_span(
        Span.from_core_fields(core, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id)
    )


def routed_client(proxy: LLMProxy, attempt: AttemptedRollout, **kwargs: Any) -> openai.AsyncOpenAI:
    llm = proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id)
    return openai.AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key, max_retries=0, **kwargs)


async def llm_spans(store: InMemoryLightningStore, rollout_id: str) -> list[Span]:
    return [s for s in await store.query_spans(rollout_id) if s.name == "openai.chat.completion"]


@pytest.fixture
def backend() -> Any:
    with OpenAITestServer(scripted(REPLIES)) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "streamed"])
async def test_every_call_of_a_tool_using_agent_is_one_span_with_exact_token_ids(
    stream: bool, proxy: LLMProxy, backend: OpenAITestServer, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    seen = await run_agent(routed_client(proxy, attempt), stream=stream)

    spans = await llm_spans(store, attempt.rollout_id)
    assert len(spans) == len(backend.requests) == 3
    assert [s.sequence_id for s in spans] == [1, 2, 3]
    for index, span in enumerate(spans):
        request, answer = backend.requests[index], backend.responses[index]
        assert (span.rollout_id, span.attempt_id) == (attempt.rollout_id, attempt.attempt.attempt_id)
        assert request["return_token_ids"] is True
        assert request["model"] == "test-model"  # the backend's own name
        assert span.attributes["gen_ai.request.model"] == "policy"  # the name the agent used
        assert span.attributes["prompt_token_ids"] == chat_prompt_token_ids(request["messages"])
        assert span.attributes["prompt_token_ids"] == answer["prompt_token_ids"]
        assert span.attributes["response_token_ids"] == answer["choices"][0]["token_ids"]
        assert span.attributes["agentlightning.llm_proxy.stream"] is stream
        assert span.status.status_code == "OK"
        # The agent received the token ids too (in chunks when streamed).
        assert seen[index]["prompt_token_ids"] == answer["prompt_token_ids"]
        assert seen[index]["choices"][0]["token_ids"] == answer["choices"][0]["token_ids"]
    first, second, third = (s.attributes for s in spans)
    assert first["gen_ai.completion.0.tool_calls.0.name"] == "get_weather"
    assert json.loads(str(first["gen_ai.completion.0.tool_calls.0.arguments"])) == {"city": "Paris"}
    assert first["gen_ai.completion.0.finish_reason"] == "tool_calls"
    assert second["gen_ai.prompt.3.role"] == "tool"
    assert second["gen_ai.completion.0.content"] == "It is sunny in Paris today."
    assert third["gen_ai.request.functions.0.name"] == "get_weather"
    assert third["gen_ai.completion.0.tool_calls.0.id"] == "call_2"


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "streamed"])
async def test_both_triplet_adapters_make_one_triplet_per_call_with_the_reward_on_the_last(
    stream: bool, proxy: LLMProxy, backend: OpenAITestServer, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    await run_agent(routed_client(proxy, attempt), stream=stream)
    await add_reward(store, attempt, 0.75)
    spans = list(await store.query_spans(attempt.rollout_id))

    for adapter in (LlmProxyTraceToTriplet(), TracerTraceToTriplet()):
        triplets = adapter.adapt(spans)
        assert [t.prompt["token_ids"] for t in triplets] == [r["prompt_token_ids"] for r in backend.responses]
        assert [t.response["token_ids"] for t in triplets] == [r["choices"][0]["token_ids"] for r in backend.responses]
        assert [t.reward for t in triplets] == [None, None, 0.75]
        report = adapter.last_report
        assert report is not None
        assert report.n_triplets == 3 and report.n_triplets_without_token_ids == 0
        assert report.n_llm_spans == 3 and report.dropped == []  # the raw_gen_ai_request children are parts
        assert report.token_drift == []  # each prompt extends the previous prompt + response
        assert report.unmatched_rewards == []


async def test_a_chat_template_that_rerenders_history_shows_up_as_token_drift(
    make_proxy: Any, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    with OpenAITestServer(scripted(REPLIES), template_drift=True) as drifting:
        proxy = await make_proxy([model_entry("policy", drifting)])
        await run_agent(routed_client(proxy, attempt), stream=True)
    triplets = LlmProxyTraceToTriplet().adapt(await store.query_spans(attempt.rollout_id))
    assert len(triplets) == 3
    adapter = TracerTraceToTriplet()
    adapter.adapt(await store.query_spans(attempt.rollout_id))
    assert adapter.last_report is not None
    assert [(d.turn, d.previous_turn) for d in adapter.last_report.token_drift] == [(1, 0), (2, 1)]


async def test_logprobs_callback_records_the_logprobs_of_each_generated_token(
    make_proxy: Any, backend: OpenAITestServer, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    proxy = await make_proxy(
        [model_entry("policy", backend)], callbacks=["return_token_ids", "opentelemetry", "logprobs"]
    )
    await run_agent(routed_client(proxy, attempt), stream=True, turns=2)
    assert all(request["logprobs"] is True for request in backend.requests)
    for span in await llm_spans(store, attempt.rollout_id):
        logprobs = json.loads(str(span.attributes["logprobs.content"]))
        assert len(logprobs) == len(span.attributes["response_token_ids"])  # type: ignore[arg-type]
        assert all(entry["logprob"] < 0 for entry in logprobs)
    (triplet, _) = TracerTraceToTriplet().adapt(await store.query_spans(attempt.rollout_id))
    assert triplet.response["logprobs"]


async def test_without_the_token_ids_callback_the_backend_is_not_asked_and_the_report_says_so(
    make_proxy: Any, backend: OpenAITestServer, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    proxy = await make_proxy([model_entry("policy", backend)], callbacks=["opentelemetry"])
    await run_agent(routed_client(proxy, attempt), stream=False, turns=1)
    assert "return_token_ids" not in backend.requests[0]
    (span,) = await llm_spans(store, attempt.rollout_id)
    assert "prompt_token_ids" not in span.attributes
    adapter = LlmProxyTraceToTriplet()
    adapter.adapt([span])
    assert adapter.last_report is not None and adapter.last_report.n_triplets_without_token_ids == 1


async def test_stream_conversion_calls_the_backend_unstreamed_and_still_streams_to_the_agent(
    make_proxy: Any, backend: OpenAITestServer, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    proxy = await make_proxy([model_entry("policy", backend)], middlewares=["rollout_attempt", "stream_conversion"])
    seen = await run_agent(routed_client(proxy, attempt), stream=True)
    assert all(request.get("stream") is False and "stream_options" not in request for request in backend.requests)
    spans = await llm_spans(store, attempt.rollout_id)
    assert len(spans) == 3
    for response, answer, span in zip(seen, backend.responses, spans, strict=True):
        assert response["choices"][0]["message"].get("content") == answer["choices"][0]["message"]["content"]
        assert response["prompt_token_ids"] == answer["prompt_token_ids"] == span.attributes["prompt_token_ids"]
        assert response["choices"][0]["token_ids"] == answer["choices"][0]["token_ids"]
        assert span.attributes["agentlightning.llm_proxy.stream_converted"] is True
    assert seen[0]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"


async def test_calls_outside_any_rollout_are_forwarded_but_not_recorded(
    proxy: LLMProxy, backend: OpenAITestServer, store: InMemoryLightningStore
):
    client = openai.AsyncOpenAI(base_url=f"{proxy.endpoint}/v1", api_key="unused", max_retries=0)
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    stream = await client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    async for _ in stream:
        pass
    assert len(backend.requests) == 2
    assert (await store.statistics()).get("total_spans") == 0


async def test_rollout_and_attempt_headers_attribute_calls_on_the_plain_route(
    proxy: LLMProxy, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    client = openai.AsyncOpenAI(
        base_url=f"{proxy.endpoint}/v1",
        api_key="unused",
        default_headers={"x-rollout-id": attempt.rollout_id, "x-attempt-id": attempt.attempt.attempt_id},
    )
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    (span,) = await llm_spans(store, attempt.rollout_id)
    assert span.attempt_id == attempt.attempt.attempt_id


async def test_a_w3c_traceparent_from_the_agent_parents_the_proxy_span(
    proxy: LLMProxy, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    client = routed_client(proxy, attempt, default_headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    (span,) = await llm_spans(store, attempt.rollout_id)
    assert (span.trace_id, span.parent_id) == (trace_id, parent_id)


async def test_spans_written_in_the_background_are_flushed_when_the_proxy_stops(
    make_proxy: Any, backend: OpenAITestServer, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    from agentlightning.llm_proxy.callbacks import LightningOpenTelemetry

    proxy = await make_proxy(
        [model_entry("policy", backend)], callbacks=["return_token_ids", LightningOpenTelemetry(wait_for_store=False)]
    )
    await run_agent(routed_client(proxy, attempt), stream=False, turns=2)
    await proxy.stop()
    spans = await llm_spans(store, attempt.rollout_id)
    assert [s.sequence_id for s in spans] == [1, 2]


async def test_the_sync_openai_client_works_against_a_thread_mode_proxy(
    proxy: LLMProxy, store: InMemoryLightningStore, attempt: AttemptedRollout
):
    llm = proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id)
    client = openai.OpenAI(base_url=llm.endpoint, api_key=llm.api_key, max_retries=0)
    reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.tool_calls is not None  # first scripted reply is a tool call
    assert len(await llm_spans(store, attempt.rollout_id)) == 1


async def test_a_call_for_a_rollout_the_store_does_not_know_still_answers_the_agent(
    proxy: LLMProxy, store: InMemoryLightningStore, caplog: pytest.LogCaptureFixture
):
    llm = proxy.as_resource("ro-elsewhere", "at-elsewhere")
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    reply = await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.tool_calls is not None
    assert (await store.statistics()).get("total_spans") == 0
    assert "rollout 'ro-elsewhere'" in caplog.text


async def test_an_openai_entry_goes_to_openai_base_url(
    monkeypatch: pytest.MonkeyPatch,
    make_proxy: Any,
    backend: OpenAITestServer,
    store: InMemoryLightningStore,
    attempt: AttemptedRollout,
):
    monkeypatch.setenv("OPENAI_BASE_URL", backend.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    proxy = await make_proxy([{"model_name": "policy", "litellm_params": {"model": f"openai/{backend.model}"}}])
    client = routed_client(proxy, attempt)
    answer = await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content
    assert len(backend.requests) == 1 and backend.requests[0]["model"] == backend.model
    (span,) = await llm_spans(store, attempt.rollout_id)
    assert span.attributes["agentlightning.llm_proxy.api_base"] == backend.base_url.rstrip("/")
