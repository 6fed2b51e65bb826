"""Arbitrary Python values as spans: literals, bytes (base64) or JSON."""

from __future__ import annotations

import base64
import json
from typing import Any, Optional

from agentlightning.semconv import AGL_OBJECT, LightningSpanAttributes
from agentlightning.types import Attributes, SpanCoreFields, SpanLike

from ._tracer import log_emitted, resolve_tracer

__all__ = ["emit_object", "get_object_value"]

_TYPE = LightningSpanAttributes.OBJECT_TYPE.value
_LITERAL = LightningSpanAttributes.OBJECT_LITERAL.value
_JSON = LightningSpanAttributes.OBJECT_JSON.value


def _qualified_type_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _object_attributes(obj: Any) -> Attributes:
    if isinstance(obj, (bytes, bytearray)):
        return {_TYPE: "bytes", _LITERAL: base64.b64encode(bytes(obj)).decode("ascii")}
    if isinstance(obj, (str, bool, int, float)):
        return {_TYPE: _qualified_type_name(obj), _LITERAL: obj}
    try:
        encoded = json.dumps(obj)
    except (TypeError, ValueError) as exc:
        raise RuntimeError(
            f"emit_object cannot serialise a {_qualified_type_name(obj)} to JSON ({exc}); convert it to "
            "dicts/lists/str/numbers first (e.g. model.model_dump())"
        ) from exc
    return {_TYPE: _qualified_type_name(obj), _JSON: encoded}


def emit_object(obj: Any, attributes: Optional[Attributes] = None, propagate: bool = True) -> SpanCoreFields:
    """Record a value as an `agentlightning.object` span (type name plus a literal or JSON text)."""
    span_attributes: Attributes = {**(attributes or {}), **_object_attributes(obj)}
    tracer = resolve_tracer(propagate, "emit_object")
    return log_emitted(tracer.create_span(AGL_OBJECT, attributes=span_attributes))


def get_object_value(span: SpanLike) -> Any:
    """Decode the value of an `agentlightning.object` span; None for other spans."""
    if span.name != AGL_OBJECT:
        return None
    attributes = span.attributes or {}
    if attributes.get(_TYPE) == "bytes" and isinstance(attributes.get(_LITERAL), str):
        return base64.b64decode(str(attributes[_LITERAL]))
    if _LITERAL in attributes:
        return attributes[_LITERAL]
    if isinstance(attributes.get(_JSON), str):
        return json.loads(str(attributes[_JSON]))
    return None
