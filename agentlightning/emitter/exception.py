"""Exceptions as spans, with the standard OpenTelemetry `exception.*` attributes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional

from agentlightning.attributes.otel import format_exception_attributes
from agentlightning.semconv import AGL_EXCEPTION, AGL_EXCEPTION_SUMMARY
from agentlightning.types import Attributes, Span, SpanCoreFields, TraceStatus

from ._tracer import extra_attributes, log_emitted, resolve_tracer

__all__ = ["emit_exception", "find_failure"]


def emit_exception(
    exception: BaseException, attributes: Optional[Mapping[str, Any]] = None, propagate: bool = True
) -> SpanCoreFields:
    """Record an exception the agent handled as an `agentlightning.exception` span (status OK).

    Nested `attributes` are flattened into dotted keys, as v0.3 does.
    """
    if not isinstance(exception, BaseException):  # type: ignore[redundant-expr]
        raise TypeError(f"emit_exception expects an exception instance, got {type(exception).__name__}")
    span_attributes: Attributes = {**format_exception_attributes(exception), **extra_attributes(attributes)}
    tracer = resolve_tracer(propagate, "emit_exception")
    return log_emitted(
        tracer.create_span(AGL_EXCEPTION, attributes=span_attributes, status=TraceStatus(status_code="OK"))
    )


def find_failure(spans: Iterable[Span]) -> Optional[str]:
    """The error that failed an attempt, as one line, from its last `agentlightning.exception` span.

    The runner stores the line itself (`agentlightning.exception.summary`); for spans written without it,
    `exception.type: first line of exception.message`. None when the spans hold no exception.
    """
    for span in reversed(list(spans)):
        if span.name != AGL_EXCEPTION:
            continue
        summary = span.attributes.get(AGL_EXCEPTION_SUMMARY)
        if isinstance(summary, str) and summary:
            return summary
        kind = span.attributes.get("exception.type")
        if kind:
            lines = str(span.attributes.get("exception.message") or "").strip().splitlines()
            return f"{kind}: {lines[0]}" if lines else str(kind)
    return None
