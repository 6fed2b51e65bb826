"""Worker routes: querying workers, reading one, recording a worker heartbeat."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from agentlightning.store.base import LightningStore
from agentlightning.store.utils import check_filter_logic, check_worker_status
from agentlightning.types import PaginatedResult, Worker

from ..bodies import (
    QueryWorkersBody,
    StoreRoute,
    UpdateWorkerBody,
    check_page,
    int64_query,
    json_response,
    present_fields,
    read_json,
    reject_nulls,
)
from ..context import API_PREFIX, store_of
from ..openapi import json_body

__all__ = ["router"]


async def _query_workers(store: LightningStore, q: QueryWorkersBody) -> Response:
    check_filter_logic(q.filter_logic)
    check_page("worker", q.sort_by, q.sort_order, q.limit, q.offset)
    for status in q.status_in or []:
        check_worker_status(status)
    result = await store.query_workers(
        status_in=q.status_in,  # type: ignore[arg-type]
        worker_id_contains=q.worker_id_contains,
        filter_logic=q.filter_logic,  # type: ignore[arg-type]
        sort_by=q.sort_by,
        sort_order=q.sort_order,  # type: ignore[arg-type]
        limit=q.limit,
        offset=q.offset,
    )
    return json_response(result)


router = APIRouter(prefix=API_PREFIX, route_class=StoreRoute, tags=["workers"])


@router.get("/workers", response_model=PaginatedResult[Worker])
async def get_workers(
    request: Request,
    status_in: Optional[list[str]] = Query(None),
    worker_id_contains: Optional[str] = None,
    filter_logic: str = "and",
    sort_by: Optional[str] = None,
    sort_order: str = "asc",
    limit: int = int64_query(-1),
    offset: int = int64_query(0),
) -> Response:
    return await _query_workers(
        store_of(request),
        QueryWorkersBody(
            status_in=status_in,
            worker_id_contains=worker_id_contains,
            filter_logic=filter_logic,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        ),
    )


@router.post(
    "/workers/search",
    response_model=PaginatedResult[Worker],
    openapi_extra=json_body(QueryWorkersBody, required=False),
)
async def search_workers(request: Request) -> Response:
    return await _query_workers(store_of(request), await read_json(request, QueryWorkersBody, optional=True))


@router.get("/workers/{worker_id}", response_model=Optional[Worker])
async def get_worker(request: Request, worker_id: str) -> Response:
    """The worker, or `null` for an id never seen (as in v0.3: an unknown worker is not an error)."""
    return json_response(await store_of(request).get_worker_by_id(worker_id))


@router.post("/workers/{worker_id}", response_model=Worker, openapi_extra=json_body(UpdateWorkerBody, required=False))
async def update_worker(worker_id: str, request: Request) -> Response:
    body = await read_json(request, UpdateWorkerBody, optional=True)
    reject_nulls(body, ("heartbeat_stats",))
    return json_response(await store_of(request).update_worker(worker_id, **present_fields(body)))
