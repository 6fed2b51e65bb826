"""Tracing behaviours v0.3 code relies on: resource ids of remotely stored spans, the span processor's shape."""

from __future__ import annotations

import asyncio

import openai
import pytest
from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentlightning.emitter import emit_message, get_message_value
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.store_http.client import LightningStoreClient
from agentlightning.store_http.server import LightningStoreServer
from agentlightning.tracer.base import clear_active_tracer
from agentlightning.tracer.otel import DUMMY_ATTEMPT_ID, DUMMY_ROLLOUT_ID, LightningSpanProcessor, OtelTracer
from tests.support.openai_server import OpenAITestServer


async def test_spans_sent_to_a_remote_store_name_their_rollout_and_attempt_in_the_resource() -> None:
    inner = InMemoryLightningStore()
    server = LightningStoreServer(inner, host="127.0.0.1", port=0)
    await server.start()
    client = LightningStoreClient(server.endpoint)
    tracer = OtelTracer(instrument_openai=False)
    try:
        tracer.init_worker(0, client)
        attempted = await client.start_rollout(input={"q": 1})
        rollout_id, attempt_id = attempted.rollout_id, attempted.attempt.attempt_id
        async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
            emit_message("hello")
        (span,) = await client.query_spans(rollout_id)
        assert span.resource.attributes["agentlightning.rollout_id"] == rollout_id
        assert span.resource.attributes["agentlightning.attempt_id"] == attempt_id
        assert tracer.get_last_trace()[0].resource.attributes["agentlightning.attempt_id"] == attempt_id
    finally:
        tracer.teardown_worker(0)
        clear_active_tracer()
        await client.close()
        await server.stop()


async def test_llm_spans_record_whether_the_request_streamed(
    tracer: OtelTracer, store: InMemoryLightningStore, openai_server: OpenAITestServer
) -> None:
    client = openai.AsyncOpenAI(base_url=openai_server.base_url, api_key="test", max_retries=0)
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "one"}])
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "two"}], stream=True
        )
        async for _ in stream:
            pass
    spans = [s for s in await store.query_spans(attempted.rollout_id) if s.name == "openai.chat.completion"]
    assert [s.attributes["gen_ai.request.streaming"] for s in spans] == [False, True]


async def test_lightning_span_processor_has_v03_shape(tracer: OtelTracer, store: InMemoryLightningStore) -> None:
    processor = tracer.span_processor
    assert isinstance(processor, LightningSpanProcessor)
    assert (processor.store, processor.rollout_id, processor.attempt_id) == (None, None, None)
    assert LightningSpanProcessor(disable_store_submission=True).disable_store_submission is True
    attempted = await store.start_rollout(input="q")
    rollout_id, attempt_id = attempted.rollout_id, attempted.attempt.attempt_id
    async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
        assert (processor.store, processor.rollout_id, processor.attempt_id) == (store, rollout_id, attempt_id)
        assert f"rollout_id={rollout_id!r}" in repr(processor)
        emit_message("stored")
        processor.disable_store_submission = True
        emit_message("kept locally")
        processor.disable_store_submission = False
    assert sorted(str(get_message_value(s)) for s in processor.spans()) == ["kept locally", "stored"]
    assert [get_message_value(s) for s in await store.query_spans(rollout_id)] == ["stored"]
    assert processor.rollout_id is None


# ---- LightningSpanProcessor used directly, as v0.3 allowed: with_context(...) and `with processor:` ----


def _processor_and_tracer() -> tuple[LightningSpanProcessor, trace_api.Tracer]:
    provider = TracerProvider()
    processor = LightningSpanProcessor()
    provider.add_span_processor(processor)
    return processor, provider.get_tracer("v03-user-code")


def _record(tracer: trace_api.Tracer) -> None:
    with tracer.start_as_current_span("outer"):
        with tracer.start_as_current_span("inner"):
            pass


@pytest.mark.parametrize("thread_safe", [False, True], ids=["plain-store", "thread-safe-store"])
def test_with_context_writes_spans_to_the_store_from_synchronous_code(thread_safe: bool) -> None:
    store = InMemoryLightningStore(thread_safe=thread_safe)
    attempted = asyncio.run(store.start_rollout(input="q"))
    rollout_id, attempt_id = attempted.rollout_id, attempted.attempt.attempt_id
    processor, tracer = _processor_and_tracer()
    with processor.with_context(store=store, rollout_id=rollout_id, attempt_id=attempt_id) as entered:
        assert entered is processor
        assert (processor.store, processor.rollout_id, processor.attempt_id) == (store, rollout_id, attempt_id)
        _record(tracer)
    _record(tracer)  # outside every context: neither stored nor collected
    assert (processor.store, processor.rollout_id, processor.attempt_id) == (None, None, None)
    stored = asyncio.run(store.query_spans(rollout_id))
    assert [(s.name, s.sequence_id, s.attempt_id) for s in stored] == [
        ("inner", 1, attempt_id),
        ("outer", 2, attempt_id),
    ]
    assert [s.span_id for s in processor.spans()] == [s.span_id for s in stored]


async def test_with_context_in_async_code_writes_spans_on_leaving() -> None:
    store = InMemoryLightningStore()  # not thread-safe: written from this loop
    attempted = await store.start_rollout(input="q")
    rollout_id, attempt_id = attempted.rollout_id, attempted.attempt.attempt_id
    processor, tracer = _processor_and_tracer()
    async with processor.with_context(store=store, rollout_id=rollout_id, attempt_id=attempt_id):
        _record(tracer)
    assert [s.name for s in await store.query_spans(rollout_id)] == ["inner", "outer"]
    # A plain `with` inside a running loop cannot block it: the spans are written once the loop runs again.
    context = processor.with_context(store=store, rollout_id=rollout_id, attempt_id=attempt_id)
    with context:
        with tracer.start_as_current_span("second"):
            pass
    await context.wait_closed()
    assert [s.name for s in await store.query_spans(rollout_id)] == ["inner", "outer", "second"]
    assert [s.name for s in processor.spans()] == ["second"]  # each context starts a fresh list


def test_the_processor_as_a_context_manager_traces_locally() -> None:
    processor, tracer = _processor_and_tracer()
    with processor as entered:
        assert entered is processor and processor.store is None
        _record(tracer)
    assert [(s.name, s.rollout_id, s.attempt_id) for s in processor.spans()] == [
        ("inner", DUMMY_ROLLOUT_ID, DUMMY_ATTEMPT_ID),
        ("outer", DUMMY_ROLLOUT_ID, DUMMY_ATTEMPT_ID),
    ]
    with processor:
        assert processor.spans() == []  # entering starts a fresh trace
        with tracer.start_as_current_span("again"):
            pass
    assert [s.name for s in processor.spans()] == ["again"]


def test_with_context_refuses_a_missing_store_or_ids() -> None:
    processor = LightningSpanProcessor()
    store = InMemoryLightningStore()
    with pytest.raises(ValueError, match="store"):
        processor.with_context(store=None, rollout_id="ro-1", attempt_id="at-1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rollout_id"):
        processor.with_context(store=store, rollout_id="", attempt_id="at-1")
    with pytest.raises(ValueError, match="attempt_id"):
        processor.with_context(store=store, rollout_id="ro-1", attempt_id=None)  # type: ignore[arg-type]


def _finished_span(name: str) -> ReadableSpan:
    """A span ended by another provider: the processor never saw it start."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("elsewhere").start_as_current_span(name):
        pass
    (span,) = exporter.get_finished_spans()
    return span


def test_on_end_keeps_a_span_it_did_not_see_start_in_the_open_trace() -> None:
    processor = LightningSpanProcessor()
    with processor:
        processor.on_end(_finished_span("handed-in"))
    assert [(s.name, s.rollout_id) for s in processor.spans()] == [("handed-in", DUMMY_ROLLOUT_ID)]


def test_on_end_stores_a_span_it_did_not_see_start_under_the_context_attempt() -> None:
    store = InMemoryLightningStore(thread_safe=True)
    attempted = asyncio.run(store.start_rollout(input="q"))
    rollout_id, attempt_id = attempted.rollout_id, attempted.attempt.attempt_id
    processor = LightningSpanProcessor()
    with processor.with_context(store=store, rollout_id=rollout_id, attempt_id=attempt_id):
        processor.on_end(_finished_span("handed-in"))
    assert [(s.name, s.attempt_id) for s in asyncio.run(store.query_spans(rollout_id))] == [("handed-in", attempt_id)]


def test_on_end_outside_every_trace_keeps_nothing() -> None:
    processor = LightningSpanProcessor()
    processor.on_end(_finished_span("stray"))
    with processor:
        pass
    assert processor.spans() == []
