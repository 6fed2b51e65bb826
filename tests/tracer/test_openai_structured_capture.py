"""Structured outputs of the OpenAI client (`chat.completions.parse`, which bypasses `create`) become LLM spans."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from agentlightning.instrumentation.openai import instrument_openai, is_openai_wrapper, uninstrument_openai
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import Span
from tests.support.openai_server import OpenAITestServer

pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")


class Answer(BaseModel):
    city: str
    temperature: int


ANSWER = {"city": "Oslo", "temperature": 21}


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(lambda request: json.dumps(ANSWER)) as server:
        yield server


def _parse_kwargs(content: str) -> dict[str, Any]:
    return {
        "model": "policy-model",
        "messages": [{"role": "user", "content": content}],
        "response_format": Answer,
        "temperature": 0.5,
        "extra_body": {"return_token_ids": True},
    }


async def _llm_spans(store: InMemoryLightningStore, rollout_id: str) -> list[Span]:
    return [s for s in await store.query_spans(rollout_id) if s.name == "openai.chat.completion"]


def _assert_parsed_call(span: Span, served: dict[str, Any], content: str) -> None:
    attributes = span.attributes
    assert attributes["gen_ai.request.model"] == "policy-model"
    assert attributes["gen_ai.request.temperature"] == 0.5
    assert attributes["gen_ai.prompt.0.content"] == content
    assert attributes["gen_ai.response.id"] == served["id"]
    assert json.loads(str(attributes["gen_ai.completion.0.content"])) == ANSWER
    assert attributes["prompt_token_ids"] == served["prompt_token_ids"]
    assert attributes["response_token_ids"] == served["choices"][0]["token_ids"]


async def test_sync_parse_and_its_raw_response_variant_are_captured(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        parsed = client.chat.completions.parse(**_parse_kwargs("plain"))
        assert parsed.choices[0].message.parsed == Answer(**ANSWER)
        raw = client.chat.completions.with_raw_response.parse(**_parse_kwargs("raw"))
        assert raw.parse().choices[0].message.parsed == Answer(**ANSWER)
    spans = await _llm_spans(store, attempted.rollout_id)
    assert len(spans) == 2 == len(server.responses)
    for span, served, content in zip(spans, server.responses, ["plain", "raw"], strict=True):
        _assert_parsed_call(span, served, content)


async def test_async_parse_is_captured(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        parsed = await client.chat.completions.parse(**_parse_kwargs("async"))
        assert parsed.choices[0].message.parsed == Answer(**ANSWER)
        raw = await client.chat.completions.with_raw_response.parse(**_parse_kwargs("async raw"))
        assert raw.parse().choices[0].message.parsed == Answer(**ANSWER)
    await client.close()
    spans = await _llm_spans(store, attempted.rollout_id)
    assert len(spans) == 2
    for span, served, content in zip(spans, server.responses, ["async", "async raw"], strict=True):
        _assert_parsed_call(span, served, content)


async def test_parse_stream_helper_is_captured_once(
    tracer: OtelTracer, store: InMemoryLightningStore, server: OpenAITestServer
) -> None:
    """`.stream(response_format=...)` goes through `create`: one span, not one per wrapper."""
    client = openai.OpenAI(base_url=server.base_url, api_key="test")
    kwargs = _parse_kwargs("streamed")
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        with client.chat.completions.stream(**kwargs) as stream:
            final = stream.get_final_completion()
    assert final.choices[0].message.parsed == Answer(**ANSWER)
    (span,) = await _llm_spans(store, attempted.rollout_id)
    _assert_parsed_call(span, server.responses[0], "streamed")


def test_parse_wrappers_are_installed_and_removed_with_create() -> None:
    from openai.resources.chat.completions import AsyncCompletions, Completions

    instrument_openai()
    assert is_openai_wrapper(Completions.__dict__["parse"]) and is_openai_wrapper(AsyncCompletions.__dict__["parse"])
    uninstrument_openai()
    try:
        assert not is_openai_wrapper(Completions.__dict__["parse"])
        assert not is_openai_wrapper(AsyncCompletions.__dict__["parse"])
    finally:
        instrument_openai()
    assert is_openai_wrapper(Completions.__dict__["parse"])
