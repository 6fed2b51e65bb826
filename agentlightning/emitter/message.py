"""Free-text messages as spans."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from agentlightning.semconv import AGL_MESSAGE, LightningSpanAttributes
from agentlightning.types import Attributes, SpanCoreFields, SpanLike

from ._tracer import extra_attributes, log_emitted, resolve_tracer

__all__ = ["emit_message", "get_message_value"]

_BODY = LightningSpanAttributes.MESSAGE_BODY.value


def emit_message(
    message: str, attributes: Optional[Mapping[str, Any]] = None, propagate: bool = True
) -> SpanCoreFields:
    """Record a message as an `agentlightning.message` span with attribute `agentlightning.message.body`.

    Nested `attributes` are flattened into dotted keys (`{"a": {"b": 1}}` -> `a.b`), as v0.3 does.
    """
    if not isinstance(message, str):  # type: ignore[redundant-expr]
        raise TypeError(f"emit_message expects a str, got {type(message).__name__}; use emit_object for other values")
    span_attributes: Attributes = {_BODY: message, **extra_attributes(attributes)}
    tracer = resolve_tracer(propagate, "emit_message")
    return log_emitted(tracer.create_span(AGL_MESSAGE, attributes=span_attributes))


def get_message_value(span: SpanLike) -> Optional[str]:
    """The `agentlightning.message.body` of a span, None when it has none; TypeError when it is not a str."""
    attributes = span.attributes or {}
    if _BODY not in attributes:
        return None
    value = attributes[_BODY]
    if not isinstance(value, str):
        raise TypeError(f"{_BODY} must be a string, got {type(value).__name__}")
    return value
