"""Free-text messages as spans."""

from __future__ import annotations

from typing import Optional

from agentlightning.semconv import AGL_MESSAGE, LightningSpanAttributes
from agentlightning.types import Attributes, SpanCoreFields, SpanLike

from ._tracer import log_emitted, resolve_tracer

__all__ = ["emit_message", "get_message_value"]

_BODY = LightningSpanAttributes.MESSAGE_BODY.value


def emit_message(message: str, attributes: Optional[Attributes] = None, propagate: bool = True) -> SpanCoreFields:
    """Record a message as an `agentlightning.message` span with attribute `agentlightning.message.body`."""
    if not isinstance(message, str):  # type: ignore[redundant-expr]
        raise TypeError(f"emit_message expects a str, got {type(message).__name__}; use emit_object for other values")
    span_attributes: Attributes = {**(attributes or {}), _BODY: message}
    tracer = resolve_tracer(propagate, "emit_message")
    return log_emitted(tracer.create_span(AGL_MESSAGE, attributes=span_attributes))


def get_message_value(span: SpanLike) -> Optional[str]:
    """The message body of an `agentlightning.message` span, or None for other spans."""
    if span.name != AGL_MESSAGE:
        return None
    value = (span.attributes or {}).get(_BODY)
    return value if isinstance(value, str) else None
