"""Span routes: storing spans (one or many), allocating sequence ids, querying a rollout's spans."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Request
from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response

from agentlightning.store.base import LightningStore
from agentlightning.store.utils import check_filter_logic
from agentlightning.types import PaginatedResult, Span

from ..bodies import (
    JSON_MEDIA_TYPE,
    ManySequenceIdsBody,
    NextSequenceIdBody,
    QuerySpansBody,
    StoreRoute,
    attempt_exists,
    attempts_exist,
    check_int64,
    check_page,
    int64_query,
    json_response,
    missing_or,
    read_json,
    validate_body,
    validation_error,
)
from ..context import API_PREFIX, store_of
from ..errors import HTTPError
from ..openapi import json_body

__all__ = ["router"]

_SPANS: TypeAdapter[list[Span]] = TypeAdapter(list[Span])


async def _query_spans(store: LightningStore, q: QuerySpansBody) -> Response:
    check_filter_logic(q.filter_logic)
    check_page("span", q.sort_by, q.sort_order, q.limit, q.offset)
    fields = q.model_dump()
    rollout_id = fields.pop("rollout_id")
    attempt_id = fields.pop("attempt_id")
    return json_response(await store.query_spans(rollout_id, attempt_id, **fields))


router = APIRouter(prefix=API_PREFIX, route_class=StoreRoute, tags=["spans"])


# `null` when the span repeats one already stored (a duplicate is skipped: first write wins).
@router.post("/spans", status_code=201, response_model=Optional[Span], openapi_extra=json_body(Span, name="SpanInput"))
async def add_span(request: Request) -> Response:
    store = store_of(request)
    raw = await request.body()
    if not raw.strip():
        raise HTTPError(400, "request body required: a JSON span")
    try:
        span = validate_body(Span, raw)
    except ValidationError as exc:
        raise validation_error(exc, "span") from None
    check_int64(span.sequence_id, "sequence_id")
    try:
        return json_response(await store.add_span(span), 201)
    except (ValueError, KeyError) as exc:
        raise await missing_or(exc, lambda: attempt_exists(store, span.rollout_id, span.attempt_id)) from None


@router.get("/spans", response_model=PaginatedResult[Span])
async def get_spans(
    request: Request,
    rollout_id: str,
    attempt_id: Optional[str] = None,
    trace_id: Optional[str] = None,
    trace_id_contains: Optional[str] = None,
    span_id: Optional[str] = None,
    span_id_contains: Optional[str] = None,
    parent_id: Optional[str] = None,
    parent_id_contains: Optional[str] = None,
    name: Optional[str] = None,
    name_contains: Optional[str] = None,
    filter_logic: str = "and",
    limit: int = int64_query(-1),
    offset: int = int64_query(0),
    sort_by: Optional[str] = "sequence_id",
    sort_order: str = "asc",
) -> Response:
    return await _query_spans(
        store_of(request),
        QuerySpansBody(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            trace_id=trace_id,
            trace_id_contains=trace_id_contains,
            span_id=span_id,
            span_id_contains=span_id_contains,
            parent_id=parent_id,
            parent_id_contains=parent_id_contains,
            name=name,
            name_contains=name_contains,
            filter_logic=filter_logic,
            limit=limit,
            offset=offset,
            sort_by=sort_by,
            sort_order=sort_order,
        ),
    )


@router.post("/spans/search", response_model=PaginatedResult[Span], openapi_extra=json_body(QuerySpansBody))
async def search_spans(request: Request) -> Response:
    return await _query_spans(store_of(request), await read_json(request, QuerySpansBody))


@router.post(
    "/spans/many",
    status_code=201,
    response_model=list[Span],
    openapi_extra=json_body(list[Span], name="SpanInputList"),
)
async def add_many_spans(request: Request) -> Response:
    store = store_of(request)
    raw = await request.body()
    try:
        spans = validate_body(_SPANS, raw)
    except ValidationError as exc:
        raise validation_error(exc, "spans (a JSON list of spans)") from None
    for span in spans:
        check_int64(span.sequence_id, "sequence_id")
    try:
        return json_response(list(await store.add_many_spans(spans)), 201)
    except (ValueError, KeyError) as exc:
        pairs = {(s.rollout_id, s.attempt_id) for s in spans}
        raise await missing_or(exc, lambda: attempts_exist(store, pairs)) from None


@router.post("/spans/next/many", openapi_extra=json_body(ManySequenceIdsBody))
async def many_sequence_ids(request: Request) -> Response:
    body = await read_json(request, ManySequenceIdsBody)
    sequence_ids = await store_of(request).get_many_span_sequence_ids(body.rollout_attempt_ids)
    return json_response({"sequence_ids": sequence_ids})


@router.post("/spans/next", openapi_extra=json_body(NextSequenceIdBody))
async def next_sequence_id(request: Request) -> Response:
    store = store_of(request)
    body = await read_json(request, NextSequenceIdBody)
    try:
        sequence_id = await store.get_next_span_sequence_id(body.rollout_id, body.attempt_id)
    except (ValueError, KeyError) as exc:
        raise await missing_or(exc, lambda: attempt_exists(store, body.rollout_id, body.attempt_id)) from None
    return Response(b'{"sequence_id":%d}' % sequence_id, media_type=JSON_MEDIA_TYPE)
