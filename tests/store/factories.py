"""Small builders shared by the store tests."""

from __future__ import annotations

from typing import Any, Optional

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentlightning.store import LightningStore
from agentlightning.types import AttemptedRollout, Span


def make_span(
    rollout_id: str,
    attempt_id: str,
    sequence_id: int,
    *,
    name: str = "step",
    span_id: Optional[str] = None,
    trace_id: Optional[str] = None,
    parent_id: Optional[str] = None,
    attributes: Optional[dict[str, Any]] = None,
    start_time: Optional[float] = None,
) -> Span:
    return Span.from_attributes(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        name=name,
        span_id=span_id,
        trace_id=trace_id,
        parent_id=parent_id,
        attributes=attributes or {"step": sequence_id},
        start_time=start_time,
        end_time=start_time,
    )


def span_of(rollout: AttemptedRollout, sequence_id: int, **kwargs: Any) -> Span:
    """A span for the rollout's current attempt."""
    return make_span(rollout.rollout_id, rollout.attempt.attempt_id, sequence_id, **kwargs)


def finished_otel_span(name: str) -> ReadableSpan:
    """One finished OpenTelemetry SDK span named `name`, with attribute `answer=42`."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span(name) as span:
        span.set_attribute("answer", 42)
    provider.shutdown()
    (finished,) = exporter.get_finished_spans()
    return finished


async def stats_of(store: LightningStore) -> dict[str, Any]:
    """`statistics()` as a plain dict (its TypedDict keys are all optional)."""
    return dict(await store.statistics())
