"""Decode OTLP/HTTP log exports into records the store keeps beside spans (GenAI message events).

The official GenAI instrumentations send prompts and completions as log events (`gen_ai.user.message`,
`gen_ai.choice`, ...) tied to the LLM span by trace and span id. `POST /v1/logs` stores each such event as
a record under that span: a `Span` named after the event, child of the LLM span, marked
`agentlightning.log_event` and with the body as JSON. The adapters fold these records back into the span's
events (`agentlightning.adapter.base.fold_log_events`), whichever arrived first. Log records without a
span context, or without the rollout / attempt resource attributes, are rejected (partial success).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from agentlightning.attributes.genai import AGL_LOG_EVENT, AGL_LOG_EVENT_BODY
from agentlightning.utils.otlp import (
    ATTEMPT_ID_ATTRIBUTE,
    ROLLOUT_ID_ATTRIBUTE,
    OtlpSpan,
    _any_value,  # pyright: ignore[reportPrivateUsage]
    _attributes,  # pyright: ignore[reportPrivateUsage]
    _seconds,  # pyright: ignore[reportPrivateUsage]
    export_response,
    fix_json_ids,
    json_records,
    parse_export_request,
)

__all__ = ["parse_export_logs_request", "otlp_log_events", "export_logs_response"]


def _fix_json_log_ids(data: dict[str, Any]) -> None:
    levels = (("resourceLogs", "resource_logs"), ("scopeLogs", "scope_logs"), ("logRecords", "log_records"))
    for record in json_records(data, *levels):
        fix_json_ids(record)


def parse_export_logs_request(body: bytes, content_type: str) -> Any:
    """Parse an `ExportLogsServiceRequest` from protobuf or OTLP/JSON bytes; ValueError when malformed."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    return parse_export_request(body, content_type, ExportLogsServiceRequest(), "resourceLogs", _fix_json_log_ids)


def otlp_log_events(request: Any) -> tuple[list[OtlpSpan], int]:
    """The log records tied to a span, as span records for the store, and how many were rejected."""
    events: list[OtlpSpan] = []
    rejected = 0
    for resource_logs in request.resource_logs:
        resource_attributes = _attributes(resource_logs.resource.attributes)
        resource = {"attributes": resource_attributes, "schema_url": resource_logs.schema_url}
        rollout_id = resource_attributes.get(ROLLOUT_ID_ATTRIBUTE)
        attempt_id = resource_attributes.get(ATTEMPT_ID_ATTRIBUTE)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                attributes = _attributes(record.attributes)
                name = record.event_name or attributes.pop("event.name", None)
                if not (record.trace_id and record.span_id and rollout_id and attempt_id and name):
                    rejected += 1
                    continue
                body = _any_value(record.body) if record.HasField("body") else None
                attributes[AGL_LOG_EVENT] = True
                if body is not None:
                    attributes[AGL_LOG_EVENT_BODY] = json.dumps(body)
                trace_id = record.trace_id.hex().rjust(32, "0")
                span_id = secrets.token_hex(8)
                timestamp = _seconds(record.time_unix_nano or record.observed_time_unix_nano)
                fields: dict[str, Any] = {
                    "trace_id": trace_id,
                    "span_id": span_id,
                    "parent_id": record.span_id.hex().rjust(16, "0"),
                    "name": str(name),
                    "status": {"status_code": "UNSET", "description": None},
                    "attributes": attributes,
                    "events": [],
                    "links": [],
                    "start_time": timestamp,
                    "end_time": timestamp,
                    "context": {"trace_id": trace_id, "span_id": span_id, "is_remote": False, "trace_state": {}},
                    "parent": {
                        "trace_id": trace_id,
                        "span_id": record.span_id.hex().rjust(16, "0"),
                        "is_remote": False,
                        "trace_state": {},
                    },
                    "resource": resource,
                }
                events.append(OtlpSpan(str(rollout_id), str(attempt_id), None, fields))
    return events, rejected


def export_logs_response(content_type: str, rejected: int = 0, error_message: str = "") -> tuple[bytes, str]:
    """Body and media type of an `ExportLogsServiceResponse`, in the request's encoding."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

    return export_response(content_type, ExportLogsServiceResponse(), "rejected_log_records", rejected, error_message)
