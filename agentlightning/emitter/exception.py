"""Exceptions as spans, with the standard OpenTelemetry `exception.*` attributes."""

from __future__ import annotations

from typing import Optional

from agentlightning.semconv import AGL_EXCEPTION
from agentlightning.types import Attributes, SpanCoreFields, TraceStatus
from agentlightning.utils.otel import format_exception_attributes

from ._tracer import log_emitted, resolve_tracer

__all__ = ["emit_exception"]


def emit_exception(
    exception: BaseException, attributes: Optional[Attributes] = None, propagate: bool = True
) -> SpanCoreFields:
    """Record an exception the agent handled as an `agentlightning.exception` span (status OK)."""
    if not isinstance(exception, BaseException):  # type: ignore[redundant-expr]
        raise TypeError(f"emit_exception expects an exception instance, got {type(exception).__name__}")
    span_attributes: Attributes = {**(attributes or {}), **format_exception_attributes(exception)}
    tracer = resolve_tracer(propagate, "emit_exception")
    return log_emitted(
        tracer.create_span(AGL_EXCEPTION, attributes=span_attributes, status=TraceStatus(status_code="OK"))
    )
