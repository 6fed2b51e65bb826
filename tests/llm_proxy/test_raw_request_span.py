"""v0.3's `raw_gen_ai_request` span: the proxy records the raw backend payload beside each call span.

v0.3's LLMProxy (LiteLLM's OpenTelemetry callback) wrote, for every successful call, a `raw_gen_ai_request`
child of the call's span whose attributes are the provider request and response as `llm.<provider>.<key>`
(non-primitive values as `str(value)`, read back with `ast.literal_eval`). Every reader of LLM spans must
still see one call per request.
"""

from __future__ import annotations

import ast
from typing import Any

import openai
import pytest

from agentlightning.adapter import LlmProxyTraceToTriplet, TracerTraceToTriplet, TraceToMessages
from agentlightning.llm_proxy.callbacks import LightningOpenTelemetry
from agentlightning.llm_proxy.proxy import LLMProxy
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import AttemptedRollout
from tests.support.openai_server import OpenAITestServer

from .conftest import call_spans, model_entry

HI: list[Any] = [{"role": "user", "content": "hi"}]


def routed_client(proxy: LLMProxy, attempt: AttemptedRollout) -> openai.AsyncOpenAI:
    llm = proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id)
    return openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)


def v03_raw_token_ids(attributes: dict[str, Any]) -> tuple[list[int], list[int]]:
    """What v0.3's `LlmProxyTraceToTriplet._extract_tokens_from_raw` reads from a raw span (vLLM backend)."""
    prompt = ast.literal_eval(str(attributes["llm.hosted_vllm.prompt_token_ids"]))
    choices = ast.literal_eval(str(attributes["llm.hosted_vllm.choices"]))
    return prompt, choices[0]["token_ids"]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "streamed"])
async def test_each_call_gets_a_raw_gen_ai_request_child_with_the_backend_payload(
    stream: bool, proxy: LLMProxy, backend: OpenAITestServer, store: InMemoryLightningStore, attempt: AttemptedRollout
) -> None:
    client = routed_client(proxy, attempt)
    for question in ("hi", "and again"):
        reply = await client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": question}], stream=stream
        )
        if stream:
            [chunk async for chunk in reply]  # type: ignore[union-attr]
    spans = list(await store.query_spans(attempt.rollout_id))
    calls = call_spans(spans)  # each call span has exactly one raw child with its sequence id
    assert [c.sequence_id for c in calls] == [1, 2]
    raws = {s.parent_id: s for s in spans if s.name == "raw_gen_ai_request"}
    for call, request, answer in zip(calls, backend.requests, backend.responses, strict=True):
        raw = raws[call.span_id]
        assert (raw.trace_id, raw.rollout_id, raw.attempt_id) == (call.trace_id, call.rollout_id, call.attempt_id)
        assert (raw.start_time, raw.end_time, raw.status.status_code) == (call.start_time, call.end_time, "OK")
        assert raw.resource.attributes["agentlightning.rollout_id"] == attempt.rollout_id
        attributes = raw.attributes
        assert not any(key.startswith("gen_ai.") for key in attributes)  # the call span carries those
        # The request as the backend received it, and its raw response, under the provider's prefix.
        assert ast.literal_eval(str(attributes["llm.hosted_vllm.messages"])) == request["messages"]
        assert attributes["llm.hosted_vllm.return_token_ids"] is True
        assert attributes["llm.hosted_vllm.model"] == answer["model"] == request["model"] == backend.model
        assert attributes["llm.hosted_vllm.id"] == answer["id"] == call.attributes["gen_ai.response.id"]
        assert v03_raw_token_ids(attributes) == (answer["prompt_token_ids"], answer["choices"][0]["token_ids"])
        assert (call.attributes["prompt_token_ids"], call.attributes["response_token_ids"]) == v03_raw_token_ids(
            attributes
        )


async def test_the_raw_span_is_part_of_its_call_for_every_reader(
    proxy: LLMProxy, backend: OpenAITestServer, store: InMemoryLightningStore, attempt: AttemptedRollout
) -> None:
    client = routed_client(proxy, attempt)
    for _ in range(3):
        await client.chat.completions.create(model="policy", messages=HI)
    spans = list(await store.query_spans(attempt.rollout_id))
    assert sorted(s.name for s in spans) == ["openai.chat.completion"] * 3 + ["raw_gen_ai_request"] * 3
    calls = call_spans(spans)

    for adapter in (TracerTraceToTriplet(), LlmProxyTraceToTriplet()):
        triplets, report = adapter.adapt_with_report(spans)
        assert [t.metadata["span_id"] for t in triplets] == [c.span_id for c in calls]  # one triplet per call
        assert [t.prompt["token_ids"] for t in triplets] == [r["prompt_token_ids"] for r in backend.responses]
        assert report.n_llm_spans == 3 and report.n_triplets == 3 and report.dropped == []
    assert len(TraceToMessages().adapt(spans)) == 3


async def test_record_raw_request_false_records_the_call_span_alone(
    make_proxy: Any, backend: OpenAITestServer, store: InMemoryLightningStore, attempt: AttemptedRollout
) -> None:
    callbacks = ["return_token_ids", LightningOpenTelemetry(record_raw_request=False)]
    proxy = await make_proxy([model_entry("policy", backend)], callbacks=callbacks)
    await routed_client(proxy, attempt).chat.completions.create(model="policy", messages=HI)
    assert [s.name for s in await store.query_spans(attempt.rollout_id)] == ["openai.chat.completion"]


async def test_a_call_without_token_ids_is_dropped_once_with_its_raw_span(
    make_proxy: Any, backend: OpenAITestServer, store: InMemoryLightningStore, attempt: AttemptedRollout
) -> None:
    proxy = await make_proxy([model_entry("policy", backend)], callbacks=["opentelemetry"])  # no token ids asked
    await routed_client(proxy, attempt).chat.completions.create(model="policy", messages=HI)
    spans = list(await store.query_spans(attempt.rollout_id))
    (call,) = call_spans(spans)
    for adapter in (
        TracerTraceToTriplet(_skip_empty_token_spans=True),
        LlmProxyTraceToTriplet(_skip_empty_token_spans=True),
    ):
        triplets, report = adapter.adapt_with_report(spans)
        assert triplets == []
        assert [(d.span_id, d.reason) for d in report.dropped] == [(call.span_id, "no_token_ids")]
        assert report.n_llm_spans == report.n_triplets + len(report.dropped) == 1
