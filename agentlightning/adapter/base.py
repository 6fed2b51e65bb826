"""Adapter base classes: callable converters from traces to what an algorithm consumes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar, Union

from opentelemetry.sdk.trace import ReadableSpan

from agentlightning.attributes.genai import AGL_LOG_EVENT
from agentlightning.types import Event, Span

__all__ = ["Adapter", "TraceAdapter", "OtelTraceAdapter", "normalize_spans", "fold_log_events"]

T_from = TypeVar("T_from")
T_to = TypeVar("T_to")

DUMMY_ROLLOUT_ID = "rollout-dummy"
DUMMY_ATTEMPT_ID = "attempt-dummy"


class Adapter(ABC, Generic[T_from, T_to]):
    """Converts one kind of data into another; calling the adapter runs `adapt`."""

    def __call__(self, source: T_from, /) -> T_to:
        return self.adapt(source)

    @abstractmethod
    def adapt(self, source: T_from, /) -> T_to:
        """Convert `source`; subclasses define the target format."""


class TraceAdapter(Adapter[Sequence[Span], T_to], Generic[T_to]):
    """An adapter from agentlightning spans (e.g. `store.query_spans(...)`) to a target format."""


class OtelTraceAdapter(Adapter[Sequence[ReadableSpan], T_to], Generic[T_to]):
    """An adapter from raw OpenTelemetry SDK spans to a target format."""


def normalize_spans(spans: Iterable[Union[Span, ReadableSpan]]) -> list[Span]:
    """Agentlightning spans as-is; OpenTelemetry spans converted with dummy ids and their list position as
    sequence id (they were never stored, so they have neither). OTLP log events stored beside a span
    (`gen_ai.user.message`...) become events of that span (`fold_log_events`)."""
    normalized: list[Span] = []
    for index, span in enumerate(spans):
        if isinstance(span, Span):
            normalized.append(span)
        elif isinstance(span, ReadableSpan):  # type: ignore[reportUnnecessaryIsInstance]
            normalized.append(Span.from_opentelemetry(span, DUMMY_ROLLOUT_ID, DUMMY_ATTEMPT_ID, index))
        else:
            raise TypeError(
                f"cannot adapt {type(span).__name__} at position {index}; pass agentlightning Spans or "
                "OpenTelemetry ReadableSpans"
            )
    return fold_log_events(normalized)


def fold_log_events(spans: list[Span]) -> list[Span]:
    """Move records that arrived as OTLP log events into their parent span's `events` (in time order).

    The official instrumentations send prompt and completion messages as log events tied to the LLM span;
    the store keeps each as a record under that span (`agentlightning.log_event`). Records whose span is
    not among `spans` stay as they are.
    """
    by_id = {span.span_id: span for span in spans}
    attached: dict[str, list[Event]] = {}
    folded: set[str] = set()
    for span in spans:
        if span.attributes.get(AGL_LOG_EVENT) is True and span.parent_id in by_id:
            attributes = {k: v for k, v in span.attributes.items() if k != AGL_LOG_EVENT}
            attached.setdefault(span.parent_id, []).append(  # type: ignore[arg-type]
                Event(name=span.name, attributes=attributes, timestamp=span.start_time)
            )
            folded.add(span.span_id)
    if not folded:
        return spans
    result: list[Span] = []
    for span in spans:
        if span.span_id in folded:
            continue
        extra = attached.get(span.span_id)
        result.append(span.model_copy(update={"events": [*span.events, *extra]}) if extra else span)
    return result
