"""Arbitrary Python values as spans: literals, bytes (base64) or JSON, in v0.3's layout."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, Optional

from agentlightning.attributes.otel import full_qualified_name
from agentlightning.semconv import AGL_OBJECT, LightningSpanAttributes
from agentlightning.types import Attributes, SpanCoreFields, SpanLike, TraceStatus

from ._tracer import extra_attributes, log_emitted, resolve_tracer

__all__ = ["emit_object", "encode_object", "get_object_value"]

_TYPE = LightningSpanAttributes.OBJECT_TYPE.value
_LITERAL = LightningSpanAttributes.OBJECT_LITERAL.value
_JSON = LightningSpanAttributes.OBJECT_JSON.value

# Literal types by the name v0.3 writes; spans stored by earlier versions of this package name them
# `builtins.<name>` and keep the literal typed (not as text).
_LITERAL_DECODERS: dict[str, Any] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": lambda text: text.lower() == "true",
    "bytes": lambda text: base64.b64decode(text.encode("utf-8")),
}


def encode_object(obj: Any) -> Attributes:
    """The span attributes describing `obj`, as v0.3 writes them.

    str/int/float/bool: `agentlightning.object.type` = the type's name, `agentlightning.object.literal` =
    `str(obj)`; bytes: type `bytes`, the literal base64; anything else: the fully qualified type name and
    `agentlightning.object.json`. RuntimeError when the value cannot be JSON-encoded.
    """
    if isinstance(obj, (str, int, float, bool)):
        return {_TYPE: type(obj).__name__, _LITERAL: str(obj)}
    if isinstance(obj, (bytes, bytearray)):
        return {_TYPE: "bytes", _LITERAL: base64.b64encode(bytes(obj)).decode("utf-8")}
    try:
        encoded = json.dumps(obj)
    except (TypeError, ValueError) as exc:
        raise RuntimeError(
            f"emit_object cannot serialise a {full_qualified_name(type(obj))} to JSON ({exc}); convert it to "
            "dicts/lists/str/numbers first (e.g. model.model_dump())"
        ) from exc
    return {_TYPE: full_qualified_name(type(obj)), _JSON: encoded}


def emit_object(obj: Any, attributes: Optional[Mapping[str, Any]] = None, propagate: bool = True) -> SpanCoreFields:
    """Record a value as an `agentlightning.object` span (status OK); nested `attributes` are flattened."""
    span_attributes: Attributes = {**encode_object(obj), **extra_attributes(attributes)}
    tracer = resolve_tracer(propagate, "emit_object")
    return log_emitted(tracer.create_span(AGL_OBJECT, attributes=span_attributes, status=TraceStatus(status_code="OK")))


def get_object_value(span: SpanLike) -> Any:
    """Decode the value an `emit_object` span carries; None when the span carries none.

    Reads v0.3's layout and the one earlier versions of this package stored (typed literals, type names
    `builtins.int`). RuntimeError when the JSON is corrupt or the literal's type is unknown.
    """
    attributes = span.attributes or {}
    if _JSON in attributes:
        try:
            return json.loads(attributes[_JSON])  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise RuntimeError(f"{_JSON} of span {span.name!r} is not valid JSON") from exc
    if _LITERAL not in attributes:
        return None
    literal = attributes[_LITERAL]
    type_name = str(attributes.get(_TYPE, "str")).removeprefix("builtins.")
    if not isinstance(literal, str):
        return literal  # written by an earlier version of this package: already typed
    decoder = _LITERAL_DECODERS.get(type_name)
    if decoder is None:
        raise RuntimeError(f"cannot decode an object literal of type {type_name!r}")
    return decoder(literal)
