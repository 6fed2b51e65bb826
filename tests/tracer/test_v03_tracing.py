"""Tracing behaviours v0.3 code relies on: resource ids of remotely stored spans, the span processor's shape."""

from __future__ import annotations

import openai

from agentlightning.emitter import emit_message, get_message_value
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.store_http.client import LightningStoreClient
from agentlightning.store_http.server import LightningStoreServer
from agentlightning.tracer.base import clear_active_tracer
from agentlightning.tracer.otel import LightningSpanProcessor, OtelTracer
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
