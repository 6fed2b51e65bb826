"""Decode OTLP/HTTP trace exports (protobuf or JSON) into span field dicts for the store.

The store server's `POST /v1/traces` uses these; rollout id, attempt id and (optionally) the span
sequence id travel as resource attributes `agentlightning.rollout_id`, `agentlightning.attempt_id`,
`agentlightning.span_sequence_id` (span attributes are consulted when the resource lacks them).
"""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

__all__ = [
    "ROLLOUT_ID_ATTRIBUTE",
    "ATTEMPT_ID_ATTRIBUTE",
    "SPAN_SEQUENCE_ID_ATTRIBUTE",
    "OtlpSpan",
    "decode_otlp_body",
    "parse_export_request",
    "parse_export_trace_request",
    "fix_json_ids",
    "json_records",
    "otlp_spans",
    "export_response",
    "export_trace_response",
    "is_protobuf_content_type",
    "is_json_content_type",
]

ROLLOUT_ID_ATTRIBUTE = "agentlightning.rollout_id"
ATTEMPT_ID_ATTRIBUTE = "agentlightning.attempt_id"
SPAN_SEQUENCE_ID_ATTRIBUTE = "agentlightning.span_sequence_id"

_STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}
_HEX = frozenset("0123456789abcdefABCDEF")
_ID_KEYS = ("traceId", "trace_id", "spanId", "span_id")
# OTLP span flags: bit 8 says whether bit 9 (the parent's is_remote) is known.
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200


@dataclass
class OtlpSpan:
    """One decoded span: its rollout/attempt (None when the export did not carry them) and `Span` fields."""

    rollout_id: Optional[str]
    attempt_id: Optional[str]
    sequence_id: Optional[int]
    fields: dict[str, Any]


def is_protobuf_content_type(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() in ("application/x-protobuf", "application/protobuf")


def is_json_content_type(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() == "application/json"


def decode_otlp_body(body: bytes, content_encoding: Optional[str]) -> bytes:
    """Undo `Content-Encoding` gzip/deflate; ValueError for other encodings or corrupt data."""
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return body
    try:
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
    except (OSError, zlib.error, EOFError) as exc:
        raise ValueError(f"request body is not valid {encoding} data: {exc}") from exc
    raise ValueError(f"unsupported Content-Encoding {content_encoding!r}; use gzip, deflate or none")


def _hex_to_base64(value: Any) -> Any:
    if isinstance(value, str) and value and len(value) % 2 == 0 and set(value) <= _HEX:
        return base64.b64encode(bytes.fromhex(value)).decode("ascii")
    return value


def json_records(data: dict[str, Any], *levels: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    """The objects at the end of a nested OTLP/JSON path (each level's camelCase and snake_case spellings)."""
    nodes: list[Any] = [data]
    for names in levels:
        nodes = [child for node in nodes if isinstance(node, dict) for child in _first_list(node, names)]
    return (node for node in nodes if isinstance(node, dict))


def _first_list(node: dict[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        if node.get(name):
            return node[name]
    return ()


def fix_json_ids(record: dict[str, Any], keys: tuple[str, ...] = _ID_KEYS) -> None:
    # OTLP/JSON writes ids as hex, while protobuf's JSON mapping expects base64 for bytes fields.
    for key in keys:
        if key in record:
            record[key] = _hex_to_base64(record[key])


def _fix_json_span_ids(data: dict[str, Any]) -> None:
    for span in json_records(data, ("resourceSpans", "resource_spans"), ("scopeSpans", "scope_spans"), ("spans",)):
        fix_json_ids(span, (*_ID_KEYS, "parentSpanId", "parent_span_id"))
        for link in span.get("links") or ():
            if isinstance(link, dict):
                fix_json_ids(link)


def parse_export_request(
    body: bytes, content_type: str, request: Any, top_key: str, fix_ids: Callable[[dict[str, Any]], None]
) -> Any:
    """Parse an OTLP export request (`request`, an empty message of its type) from protobuf or OTLP/JSON bytes.

    `top_key` is the JSON body's one key (`resourceSpans`, `resourceLogs`); `fix_ids` turns its hex ids
    into the base64 that protobuf's JSON mapping expects. ValueError when the body is malformed.
    """
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError

    kind = type(request).__name__
    if is_protobuf_content_type(content_type):
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise ValueError(f"body is not a valid protobuf {kind}: {exc}") from exc
        return request
    if is_json_content_type(content_type):
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"body is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"OTLP/JSON body must be an object with {top_key!r}, got {type(data).__name__}")
        fix_ids(data)
        try:
            json_format.ParseDict(data, request, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise ValueError(f"body is not a valid OTLP/JSON {kind}: {exc}") from exc
        return request
    raise ValueError(f"unsupported Content-Type {content_type!r}; send application/x-protobuf or application/json")


def parse_export_trace_request(body: bytes, content_type: str) -> Any:
    """Parse an `ExportTraceServiceRequest` from protobuf or OTLP/JSON bytes; ValueError when malformed."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return parse_export_request(body, content_type, ExportTraceServiceRequest(), "resourceSpans", _fix_json_span_ids)


def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        items = [_any_value(v) for v in value.array_value.values]
        items = [v for v in items if v is not None]
        if len({type(v) for v in items}) > 1 or any(isinstance(v, (list, dict)) for v in items):
            return [json.dumps(v) if isinstance(v, (list, dict)) else str(v) for v in items]
        return items
    if kind == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return getattr(value, kind)


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}", inner, out)
    elif value is not None:
        out[prefix] = value


def _attributes(key_values: Any) -> dict[str, Any]:
    """OTLP KeyValues -> flat attributes; nested key-value lists become dotted keys."""
    out: dict[str, Any] = {}
    for kv in key_values:
        _flatten(kv.key, _any_value(kv.value), out)
    return out


def _trace_state(raw: str) -> dict[str, str]:
    state: dict[str, str] = {}
    for member in raw.split(","):
        key, sep, value = member.strip().partition("=")
        if sep and key:
            state[key] = value
    return state


def _seconds(nanos: int) -> Optional[float]:
    return nanos / 1e9 if nanos else None


def _optional_int(value: Any) -> Optional[int]:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def otlp_spans(request: Any) -> list[OtlpSpan]:
    """Every span of an `ExportTraceServiceRequest`, converted to `Span` fields (ids in hex, times in s)."""
    spans: list[OtlpSpan] = []
    for resource_spans in request.resource_spans:
        resource_attributes = _attributes(resource_spans.resource.attributes)
        resource = {"attributes": resource_attributes, "schema_url": resource_spans.schema_url}
        for scope_spans in resource_spans.scope_spans:
            for src in scope_spans.spans:
                attributes = _attributes(src.attributes)
                trace_id = src.trace_id.hex().rjust(32, "0")
                span_id = src.span_id.hex().rjust(16, "0")
                parent_id = src.parent_span_id.hex() if src.parent_span_id else None
                trace_state = _trace_state(src.trace_state)
                parent_remote = bool(src.flags & _HAS_IS_REMOTE and src.flags & _IS_REMOTE)
                fields: dict[str, Any] = {
                    "trace_id": trace_id,
                    "span_id": span_id,
                    "parent_id": parent_id,
                    "name": src.name,
                    "status": {
                        "status_code": _STATUS_CODES.get(src.status.code, "UNSET"),
                        "description": src.status.message or None,
                    },
                    "attributes": attributes,
                    "events": [
                        {
                            "name": e.name,
                            "attributes": _attributes(e.attributes),
                            "timestamp": _seconds(e.time_unix_nano),
                        }
                        for e in src.events
                    ],
                    "links": [
                        {
                            "context": {
                                "trace_id": link.trace_id.hex(),
                                "span_id": link.span_id.hex(),
                                "is_remote": False,
                                "trace_state": _trace_state(link.trace_state),
                            },
                            "attributes": _attributes(link.attributes),
                        }
                        for link in src.links
                    ],
                    "start_time": _seconds(src.start_time_unix_nano),
                    "end_time": _seconds(src.end_time_unix_nano),
                    "context": {
                        "trace_id": trace_id,
                        "span_id": span_id,
                        "is_remote": False,
                        "trace_state": trace_state,
                    },
                    "parent": (
                        {"trace_id": trace_id, "span_id": parent_id, "is_remote": parent_remote, "trace_state": {}}
                        if parent_id
                        else None
                    ),
                    "resource": resource,
                }
                rollout_id = resource_attributes.get(ROLLOUT_ID_ATTRIBUTE, attributes.get(ROLLOUT_ID_ATTRIBUTE))
                attempt_id = resource_attributes.get(ATTEMPT_ID_ATTRIBUTE, attributes.get(ATTEMPT_ID_ATTRIBUTE))
                sequence_id = resource_attributes.get(
                    SPAN_SEQUENCE_ID_ATTRIBUTE, attributes.get(SPAN_SEQUENCE_ID_ATTRIBUTE)
                )
                spans.append(
                    OtlpSpan(
                        rollout_id=str(rollout_id) if rollout_id else None,
                        attempt_id=str(attempt_id) if attempt_id else None,
                        sequence_id=_optional_int(sequence_id),
                        fields=fields,
                    )
                )
    return spans


def export_response(
    content_type: str, response: Any, rejected_field: str, rejected: int, error_message: str
) -> tuple[bytes, str]:
    """Body and media type of an OTLP export response (`response`, an empty message), in the request's encoding.

    `rejected_field` is the partial-success count's protobuf name (`rejected_spans`); OTLP/JSON spells it in camelCase.
    """
    if is_protobuf_content_type(content_type):
        if rejected or error_message:
            setattr(response.partial_success, rejected_field, rejected)
            response.partial_success.error_message = error_message
        return response.SerializeToString(), "application/x-protobuf"
    payload: dict[str, Any] = {}
    if rejected or error_message:
        head, *rest = rejected_field.split("_")
        json_field = head + "".join(word.title() for word in rest)
        payload["partialSuccess"] = {json_field: str(rejected), "errorMessage": error_message}
    return json.dumps(payload).encode(), "application/json"


def export_trace_response(content_type: str, rejected_spans: int = 0, error_message: str = "") -> tuple[bytes, str]:
    """Body and media type of an `ExportTraceServiceResponse`, in the request's encoding."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    return export_response(content_type, ExportTraceServiceResponse(), "rejected_spans", rejected_spans, error_message)
