"""Attempt routes: starting an attempt of a rollout, querying its attempts, updating one, finishing one."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Request
from starlette.responses import Response

from agentlightning.store.base import LightningStore
from agentlightning.store.utils import check_attempt_status
from agentlightning.types import Attempt, AttemptedRollout, FinishedAttempt, PaginatedResult

from ..bodies import (
    FinishAttemptBody,
    QueryAttemptsBody,
    StartAttemptBody,
    StoreRoute,
    UpdateAttemptBody,
    attempt_exists,
    check_int64,
    check_page,
    int64_query,
    json_response,
    missing_or,
    not_found,
    present_fields,
    read_json,
    reject_nulls,
)
from ..context import API_PREFIX, store_of
from ..errors import HTTPError
from ..openapi import json_body
from .rollouts import rollout_exists

__all__ = ["router"]


async def _query_attempts(store: LightningStore, rollout_id: str, q: QueryAttemptsBody) -> Response:
    check_page("attempt", q.sort_by, q.sort_order, q.limit, q.offset)
    result = await store.query_attempts(
        rollout_id,
        sort_by=q.sort_by,
        sort_order=q.sort_order,  # type: ignore[arg-type]
        limit=q.limit,
        offset=q.offset,
    )
    return json_response(result)


router = APIRouter(prefix=API_PREFIX, route_class=StoreRoute, tags=["attempts"])


@router.post(
    "/rollouts/{rollout_id}/attempts",
    status_code=201,
    response_model=AttemptedRollout,
    openapi_extra=json_body(StartAttemptBody, required=False),
)
async def start_attempt(rollout_id: str, request: Request) -> Response:
    store = store_of(request)
    body = await read_json(request, StartAttemptBody, optional=True)
    try:
        return json_response(await store.start_attempt(rollout_id, worker_id=body.worker_id), 201)
    except (ValueError, KeyError) as exc:
        raise await missing_or(exc, lambda: rollout_exists(store, rollout_id)) from None


@router.get("/rollouts/{rollout_id}/attempts", response_model=PaginatedResult[Attempt])
async def get_attempts(
    request: Request,
    rollout_id: str,
    sort_by: Optional[str] = "sequence_id",
    sort_order: str = "asc",
    limit: int = int64_query(-1),
    offset: int = int64_query(0),
) -> Response:
    body = QueryAttemptsBody(sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)
    return await _query_attempts(store_of(request), rollout_id, body)


@router.post(
    "/rollouts/{rollout_id}/attempts/search",
    response_model=PaginatedResult[Attempt],
    openapi_extra=json_body(QueryAttemptsBody, required=False),
)
async def search_attempts(rollout_id: str, request: Request) -> Response:
    body = await read_json(request, QueryAttemptsBody, optional=True)
    return await _query_attempts(store_of(request), rollout_id, body)


@router.get("/rollouts/{rollout_id}/attempts/latest", response_model=Attempt)
async def get_latest_attempt(request: Request, rollout_id: str) -> Response:
    attempt = await store_of(request).get_latest_attempt(rollout_id)
    if attempt is None:
        raise not_found(f"latest attempt of rollout {rollout_id!r}")
    return json_response(attempt)


@router.post(
    "/rollouts/{rollout_id}/attempts/{attempt_id}",
    response_model=Attempt,
    openapi_extra=json_body(UpdateAttemptBody),
)
async def update_attempt(rollout_id: str, attempt_id: str, request: Request) -> Response:
    store = store_of(request)
    body = await read_json(request, UpdateAttemptBody)
    # As in v0.3, a heartbeat time or metadata is a value or left out; only worker_id may be cleared.
    reject_nulls(body, ("status", "last_heartbeat_time", "metadata"))
    fields = present_fields(body)
    if "status" in fields:
        check_attempt_status(fields["status"])
    try:
        return json_response(await store.update_attempt(rollout_id, attempt_id, **fields))
    except (ValueError, KeyError) as exc:
        raise await missing_or(exc, lambda: attempt_exists(store, rollout_id, attempt_id)) from None


@router.post(
    "/rollouts/{rollout_id}/attempts/latest",
    response_model=Attempt,
    openapi_extra=json_body(UpdateAttemptBody),
    summary="Update Latest Attempt",
)
async def update_latest_attempt(rollout_id: str, request: Request) -> Response:
    """`update_attempt(rollout_id, "latest", ...)`: the rollout's latest attempt, whichever it is."""
    return await update_attempt(rollout_id, "latest", request)


@router.post(
    "/rollouts/{rollout_id}/attempts/{attempt_id}/finish",
    response_model=FinishedAttempt,
    openapi_extra=json_body(FinishAttemptBody),
)
async def finish_attempt(rollout_id: str, attempt_id: str, request: Request) -> Response:
    """The attempt's last spans and its final status in one request (`LightningStore.finish_attempt`)."""
    store = store_of(request)
    body = await read_json(request, FinishAttemptBody)
    check_attempt_status(body.status)
    for span in body.spans:
        check_int64(span.sequence_id, "spans.sequence_id")
        if (span.rollout_id, span.attempt_id) != (rollout_id, attempt_id):  # the body contradicts the URL
            raise HTTPError(
                409,
                f"span {span.span_id!r} belongs to rollout {span.rollout_id!r} attempt {span.attempt_id!r}, not to "
                f"the attempt being finished ({rollout_id!r}, {attempt_id!r}); send it with add_many_spans",
                "ValueError",
            )
    try:
        finished = await store.finish_attempt(rollout_id, attempt_id, body.status, body.spans)  # type: ignore[arg-type]
    except (ValueError, KeyError) as exc:
        raise await missing_or(exc, lambda: attempt_exists(store, rollout_id, attempt_id)) from None
    return json_response(finished)
