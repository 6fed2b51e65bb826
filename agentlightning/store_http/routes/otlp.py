"""OTLP/HTTP ingestion routes of the store server: `POST /v1/traces` stores spans, `POST /v1/logs` stores the
log events tied to a span (GenAI message events, see `utils/otlp_logs.py`); other signals answer 501."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

from agentlightning.store.base import LightningStore
from agentlightning.store_http.otlp_logs import export_logs_response, otlp_log_events, parse_export_logs_request
from agentlightning.types import Span
from agentlightning.utils.otlp import (
    OtlpSpan,
    decode_otlp_body,
    export_trace_response,
    is_json_content_type,
    is_protobuf_content_type,
    otlp_spans,
    parse_export_trace_request,
)

from ..bodies import StoreRoute, attempts_exist, missing_or
from ..context import store_of
from ..errors import HTTPError

__all__ = ["router"]


_OTLP_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
            "application/json": {"schema": {"type": "object"}},
        },
    }
}


router = APIRouter(prefix="/v1", route_class=StoreRoute, tags=["otlp"])


@router.post("/traces", openapi_extra=_OTLP_BODY)
async def ingest_traces(request: Request) -> Response:
    store = store_of(request)
    content_type, body = await _otlp_body(request)
    try:
        export = parse_export_trace_request(body, content_type)
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None
    decoded = otlp_spans(export)
    accepted = [s for s in decoded if s.rollout_id and s.attempt_id]
    rejected = len(decoded) - len(accepted)
    await _store_or_explain(store, accepted)
    message = (
        f"{rejected} span(s) lacked the resource attributes agentlightning.rollout_id / agentlightning.attempt_id"
        if rejected
        else ""
    )
    payload, media_type = export_trace_response(content_type, rejected, message)
    return Response(payload, media_type=media_type)


@router.post("/logs", openapi_extra=_OTLP_BODY)
async def ingest_logs(request: Request) -> Response:
    """Log events tied to a span (the GenAI message events) are stored under that span."""
    store = store_of(request)
    content_type, body = await _otlp_body(request)
    try:
        export = parse_export_logs_request(body, content_type)
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None
    accepted, rejected = otlp_log_events(export)
    await _store_or_explain(store, accepted)
    message = (
        f"{rejected} log record(s) lacked a span context, an event name or the resource attributes "
        "agentlightning.rollout_id / agentlightning.attempt_id"
        if rejected
        else ""
    )
    payload, media_type = export_logs_response(content_type, rejected, message)
    return Response(payload, media_type=media_type)


def _unsupported(signal: str) -> Callable[[], Awaitable[Response]]:
    async def handler() -> Response:
        raise HTTPError(501, f"the store server does not ingest OTLP {signal}; only /v1/traces and /v1/logs are")

    return handler


router.add_api_route(
    "/metrics", _unsupported("metrics"), methods=["POST"], name="otlp_metrics", include_in_schema=False
)
router.add_api_route(
    "/development/profiles",
    _unsupported("profiles"),
    methods=["POST"],
    name="otlp_profiles",
    include_in_schema=False,
)


async def _otlp_body(request: Request) -> tuple[str, bytes]:
    """The request's content type and decoded body; 415 for other encodings, 400 for corrupt data."""
    content_type = request.headers.get("content-type", "")
    encoding = (request.headers.get("content-encoding") or "identity").strip().lower()
    if not (is_protobuf_content_type(content_type) or is_json_content_type(content_type)):
        raise HTTPError(
            415, f"unsupported Content-Type {content_type!r}; send application/x-protobuf or application/json"
        )
    if encoding not in ("identity", "gzip", "deflate"):
        raise HTTPError(415, f"unsupported Content-Encoding {encoding!r}; use gzip, deflate or none")
    try:
        return content_type, decode_otlp_body(await request.body(), encoding)
    except ValueError as exc:
        raise HTTPError(400, str(exc)) from None


async def _store_or_explain(store: LightningStore, accepted: list[OtlpSpan]) -> None:
    """Store the records; an unknown rollout or attempt becomes a 404 naming it."""
    try:
        await _store_spans(store, accepted)
    except (ValueError, KeyError) as exc:
        pairs = {(str(s.rollout_id), str(s.attempt_id)) for s in accepted}
        raise await missing_or(exc, lambda: attempts_exist(store, pairs)) from None


async def _store_spans(store: LightningStore, accepted: list[OtlpSpan]) -> None:
    """Allocate missing sequence ids in one call, then store every span in one call."""
    missing = [(str(s.rollout_id), str(s.attempt_id)) for s in accepted if s.sequence_id is None]
    if missing:
        allocated = iter(await store.get_many_span_sequence_ids(missing))
        for s in accepted:
            if s.sequence_id is None:
                s.sequence_id = next(allocated)
    spans: list[Span] = []
    for s in accepted:
        try:
            spans.append(
                Span.model_validate(
                    {
                        **s.fields,
                        "rollout_id": s.rollout_id,
                        "attempt_id": s.attempt_id,
                        "sequence_id": s.sequence_id,
                    }
                )
            )
        except ValidationError as exc:
            raise HTTPError(400, f"span {s.fields.get('span_id')!r} is not valid: {exc}") from None
    if spans:
        await store.add_many_spans(spans)
