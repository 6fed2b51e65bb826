"""Server-wide routes: the health check and the store's statistics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from ..bodies import JSON_MEDIA_TYPE, StoreRoute, json_response
from ..context import API_PREFIX, store_of

__all__ = ["router"]


router = APIRouter(prefix=API_PREFIX, route_class=StoreRoute, tags=["statistics"])


@router.get("/health")
async def health(request: Request) -> Response:
    """200 `{"status": "ok"}`; 503 `{"status": "unavailable", "detail": ...}` while the store's storage
    refuses writes (disk full, read-only), until a write succeeds again."""
    problem = store_of(request).storage_problem()
    if problem is None:
        return Response(b'{"status":"ok"}', media_type=JSON_MEDIA_TYPE)
    return json_response({"status": "unavailable", "detail": problem}, 503)


@router.get("/statistics")
async def statistics(request: Request) -> Response:
    return json_response(await store_of(request).statistics())
