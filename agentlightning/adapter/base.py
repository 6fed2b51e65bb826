"""Adapter base classes: callable converters from traces to what an algorithm consumes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Generic, TypeVar, Union

from opentelemetry.sdk.trace import ReadableSpan

from agentlightning.types import Span

__all__ = ["Adapter", "TraceAdapter", "OtelTraceAdapter", "normalize_spans"]

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
    sequence id (they were never stored, so they have neither)."""
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
    return normalized
