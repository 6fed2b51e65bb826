"""Resources routes: adding and updating versioned resources bundles, reading and querying them."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Request
from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response

from agentlightning.types import NamedResources, PaginatedResult, ResourcesUpdate

from ..bodies import StoreRoute, check_page, int64_query, json_response, not_found, validate_body, validation_error
from ..context import API_PREFIX, store_of
from ..errors import HTTPError
from ..openapi import json_body

__all__ = ["router"]

_RESOURCES: TypeAdapter[dict[str, Any]] = TypeAdapter(NamedResources)


async def _read_resources(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        raise HTTPError(400, "request body required: a JSON object of name -> resource")
    try:
        return validate_body(_RESOURCES, raw)
    except ValidationError as exc:
        raise validation_error(exc, "resources") from None


router = APIRouter(prefix=API_PREFIX, route_class=StoreRoute, tags=["resources"])


@router.get("/resources", response_model=PaginatedResult[ResourcesUpdate])
async def query_resources(
    request: Request,
    resources_id: Optional[str] = None,
    resources_id_contains: Optional[str] = None,
    sort_by: Optional[str] = None,
    sort_order: str = "asc",
    limit: int = int64_query(-1),
    offset: int = int64_query(0),
) -> Response:
    check_page("resources", sort_by, sort_order, limit, offset)
    result = await store_of(request).query_resources(
        resources_id=resources_id,
        resources_id_contains=resources_id_contains,
        sort_by=sort_by,
        sort_order=sort_order,  # type: ignore[arg-type]
        limit=limit,
        offset=offset,
    )
    return json_response(result)


@router.post(
    "/resources",
    status_code=201,
    response_model=ResourcesUpdate,
    openapi_extra=json_body(NamedResources, name="NamedResources"),
)
async def add_resources(request: Request) -> Response:
    return json_response(await store_of(request).add_resources(await _read_resources(request)), 201)


@router.get("/resources/latest", response_model=ResourcesUpdate)
async def get_latest_resources(request: Request) -> Response:
    resources = await store_of(request).get_latest_resources()
    if resources is None:
        raise not_found("latest resources (none added yet)")
    return json_response(resources)


@router.get("/resources/{resources_id}", response_model=ResourcesUpdate)
async def get_resources(request: Request, resources_id: str) -> Response:
    resources = await store_of(request).get_resources_by_id(resources_id)
    if resources is None:
        raise not_found(f"resources {resources_id!r}")
    return json_response(resources)


@router.post(
    "/resources/{resources_id}",
    response_model=ResourcesUpdate,
    openapi_extra=json_body(NamedResources, name="NamedResources"),
)
async def update_resources(resources_id: str, request: Request) -> Response:
    store = store_of(request)
    return json_response(await store.update_resources(resources_id, await _read_resources(request)))
