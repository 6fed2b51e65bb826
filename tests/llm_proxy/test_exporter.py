"""LightningSpanExporter: batched writes, a refused span never sinks the others, flush and shutdown."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agentlightning.llm_proxy.exporter import LightningSpanExporter
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import AttemptedRollout, Span


def span_for(rollout_id: str, attempt_id: str, sequence_id: int) -> Span:
    return Span.from_attributes(
        attributes={"gen_ai.prompt.0.content": "hi"},
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        name="openai.chat.completion",
    )


async def test_concurrent_spans_are_written_together_and_a_refused_one_is_logged(
    store: InMemoryLightningStore, attempt: AttemptedRollout, caplog: pytest.LogCaptureFixture
):
    exporter = LightningSpanExporter(store)
    rollout_id, attempt_id = attempt.rollout_id, attempt.attempt.attempt_id
    with caplog.at_level(logging.WARNING, logger="agentlightning.llm_proxy.exporter"):
        futures = [
            exporter.export_nowait(span_for(rollout_id, attempt_id, 1)),
            exporter.export_nowait(span_for("ro-unknown", "at-unknown", 1)),
            exporter.export_nowait(span_for(rollout_id, attempt_id, 2)),
        ]
        assert await asyncio.gather(*futures) == [True, False, True]
    assert [s.sequence_id for s in await store.query_spans(rollout_id)] == [1, 2]
    assert (exporter.n_exported, exporter.n_failed) == (2, 1)
    assert "of rollout 'ro-unknown' attempt 'at-unknown' (sequence 1) was not stored" in caplog.text


async def test_export_waits_for_the_write_and_shutdown_flushes_then_refuses(
    store: InMemoryLightningStore, attempt: AttemptedRollout
):
    exporter = LightningSpanExporter(store, max_batch_size=1)
    rollout_id, attempt_id = attempt.rollout_id, attempt.attempt.attempt_id
    assert await exporter.export(span_for(rollout_id, attempt_id, 1)) is True
    pending = [exporter.export_nowait(span_for(rollout_id, attempt_id, i)) for i in (2, 3)]
    await exporter.shutdown()
    assert all(f.done() and f.result() for f in pending)
    assert len(await store.query_spans(rollout_id)) == 3
    with pytest.raises(RuntimeError, match="the span exporter is shut down"):
        exporter.export_nowait(span_for(rollout_id, attempt_id, 4))
    with pytest.raises(ValueError, match="max_batch_size must be >= 1"):
        LightningSpanExporter(store, max_batch_size=0)
