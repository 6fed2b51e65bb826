"""Request bodies of the store REST API and the helpers that parse them and shape responses.

Bodies are validated by pydantic straight from bytes and responses written as JSON bytes, so a request
costs one validation and one serialisation. Unknown fields are rejected so typos fail loudly.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, Optional, TypeVar, Union

from fastapi import Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from agentlightning.store.base import LightningStore
from agentlightning.store.utils import check_pagination, check_sort
from agentlightning.types import EnqueueRolloutRequest, RolloutConfig, Span

from .errors import NOT_FOUND_ERROR_TYPE, HTTPError, error_body, error_from_exception

__all__ = [
    "JSON_MEDIA_TYPE",
    "StoreRoute",
    "json_response",
    "not_found",
    "read_json",
    "reject_nulls",
    "present_fields",
    "check_page",
    "validation_error",
    "missing_or",
    "attempt_exists",
    "attempts_exist",
]

M = TypeVar("M", bound=BaseModel)

# Counts and offsets travel as 64-bit integers into SQL; larger values are refused up front (422 naming the field).
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def _json_number(value: Any) -> Any:
    """Refuse `true` and `"5"` where a number is due (pydantic's lax mode would take them as 1 and 5)."""
    if isinstance(value, (bool, str)):
        raise ValueError(f"expected a number, got {type(value).__name__} {value!r}")
    return value


Int64 = Annotated[int, BeforeValidator(_json_number), Field(ge=INT64_MIN, le=INT64_MAX)]
Seconds = Annotated[float, BeforeValidator(_json_number)]


def check_int64(value: int, field: str) -> None:
    """422 naming `field` when `value` does not fit in a 64-bit integer (what SQL backends store)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise HTTPError(422, f"{field} must fit in a 64-bit integer, got {value}", "ValidationError")


def int64_query(default: int) -> Any:
    """A query parameter holding a 64-bit integer."""
    return Query(default, ge=INT64_MIN, le=INT64_MAX)


_ANY: TypeAdapter[Any] = TypeAdapter(Any)
JSON_MEDIA_TYPE = "application/json"


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(_ANY.dump_json(obj, serialize_as_any=True), status_code=status, media_type=JSON_MEDIA_TYPE)


def not_found(what: str) -> HTTPError:
    return HTTPError(404, f"{what} not found", NOT_FOUND_ERROR_TYPE)


def describe_validation(exc: Union[ValidationError, RequestValidationError]) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path"))
        message = f"{loc or 'body'}: {err.get('msg', 'invalid')}"
        value = err.get("input")
        if value is not None and not isinstance(value, (dict, list)) and len(repr(value)) <= 80:
            message += f" (got {value!r})"
        parts.append(message)
    return "; ".join(parts) or "invalid request"


def validation_error(exc: ValidationError, what: str) -> HTTPError:
    errors = exc.errors()
    if any(err.get("type") == "json_invalid" for err in errors):
        return HTTPError(400, f"malformed JSON body for {what}: {errors[0].get('msg', '')}", "ValueError")
    return HTTPError(422, f"invalid {what}: {describe_validation(exc)}", "ValidationError")


def _integral_floats_as_ints(data: Any, errors: list[Any]) -> bool:
    """Turn the floats strict validation refused as integers into ints, in place; False if any is not integral."""
    for error in errors:
        value = error.get("input")
        if error.get("type") != "int_type" or not isinstance(value, float) or not value.is_integer():
            return False
        *parents, last = error["loc"]
        target = data
        for key in parents:
            target = target[key]
        target[last] = int(value)
    return True


def validate_body(validator: Union[type[M], TypeAdapter[Any]], raw: bytes) -> Any:
    """A request body validated as JSON types say: `true` is not 1, `"5"` is not 5, `0` is not `false`.

    pydantic's lax mode would take each; strict mode is used, except that an integral float such as `5.0`
    is an integer (as JSON Schema has it, so a client may write one).
    """
    adapter = validator if isinstance(validator, TypeAdapter) else None
    try:
        if adapter is not None:
            return adapter.validate_json(raw, strict=True)
        return validator.model_validate_json(raw, strict=True)  # type: ignore[union-attr]
    except ValidationError as exc:
        errors = exc.errors()
        if any(error.get("type") == "json_invalid" for error in errors):
            raise
        data = json.loads(raw)
        if not _integral_floats_as_ints(data, errors):
            raise
    if adapter is not None:
        return adapter.validate_python(data, strict=True)
    return validator.model_validate(data, strict=True)  # type: ignore[union-attr]


async def read_json(request: Request, model: type[M], *, optional: bool = False) -> M:
    raw = await request.body()
    if not raw and optional:
        raw = b"{}"  # no body at all: every field takes its default
    elif not raw.strip():
        raise HTTPError(400, f"request body required: a JSON object for {model.__name__}")
    try:
        return validate_body(model, raw)
    except ValidationError as exc:
        raise validation_error(exc, model.__name__) from None


def reject_nulls(body: BaseModel, fields: Sequence[str]) -> None:
    for field in fields:
        if field in body.model_fields_set and getattr(body, field) is None:
            raise HTTPError(400, f"field {field!r} may not be null; omit it to leave it unchanged")


def present_fields(body: BaseModel) -> dict[str, Any]:
    """Fields the client sent (omitted ones stay UNSET in the store call)."""
    return {name: getattr(body, name) for name in body.model_fields_set}


def check_page(entity: str, sort_by: Optional[str], sort_order: str, limit: int, offset: int) -> None:
    check_pagination(limit, offset)
    check_sort(entity, sort_by, sort_order)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EnqueueBody(_Body):
    rollouts: list[EnqueueRolloutRequest]


class DequeueBody(_Body):
    limit: Int64 = 1
    worker_id: Optional[str] = None
    # Only rollouts of this run (metadata "agl_run"): the queue of one run on a store several runs share.
    run: Optional[Annotated[str, Field(min_length=1)]] = None
    # Long-poll: seconds to wait for a rollout while the queue is empty (capped by the server); 0/None: answer now.
    wait: Optional[Seconds] = None


class StartRolloutBody(_Body):
    input: Any = None
    mode: Optional[str] = None
    resources_id: Optional[str] = None
    config: Optional[RolloutConfig] = None
    metadata: Optional[dict[str, Any]] = None
    worker_id: Optional[str] = None


class QueryRolloutsBody(_Body):
    status_in: Optional[list[str]] = None
    rollout_id_in: Optional[list[str]] = None
    rollout_id_contains: Optional[str] = None
    filter_logic: str = "and"
    sort_by: Optional[str] = None
    sort_order: str = "asc"
    limit: Int64 = -1
    offset: Int64 = 0
    status: Optional[list[str]] = None
    rollout_ids: Optional[list[str]] = None


class UpdateRolloutBody(_Body):
    input: Any = None
    mode: Optional[str] = None
    resources_id: Optional[str] = None
    status: Optional[str] = None
    config: Optional[RolloutConfig] = None
    metadata: Optional[dict[str, Any]] = None


class StartAttemptBody(_Body):
    worker_id: Optional[str] = None


class QueryAttemptsBody(_Body):
    sort_by: Optional[str] = "sequence_id"
    sort_order: str = "asc"
    limit: Int64 = -1
    offset: Int64 = 0


class UpdateAttemptBody(_Body):
    status: Optional[str] = None
    worker_id: Optional[str] = None
    last_heartbeat_time: Optional[Seconds] = None
    metadata: Optional[dict[str, Any]] = None


class FinishAttemptBody(_Body):
    status: str
    spans: list[Span] = []


class QueryWorkersBody(_Body):
    status_in: Optional[list[str]] = None
    worker_id_contains: Optional[str] = None
    filter_logic: str = "and"
    sort_by: Optional[str] = None
    sort_order: str = "asc"
    limit: Int64 = -1
    offset: Int64 = 0


class UpdateWorkerBody(_Body):
    heartbeat_stats: Optional[dict[str, Any]] = None


class QuerySpansBody(_Body):
    rollout_id: str
    attempt_id: Optional[str] = None
    trace_id: Optional[str] = None
    trace_id_contains: Optional[str] = None
    span_id: Optional[str] = None
    span_id_contains: Optional[str] = None
    parent_id: Optional[str] = None
    parent_id_contains: Optional[str] = None
    name: Optional[str] = None
    name_contains: Optional[str] = None
    filter_logic: str = "and"
    limit: Int64 = -1
    offset: Int64 = 0
    sort_by: Optional[str] = "sequence_id"
    sort_order: str = "asc"


class NextSequenceIdBody(_Body):
    rollout_id: str
    attempt_id: str


class ManySequenceIdsBody(_Body):
    rollout_attempt_ids: list[tuple[str, str]]


class WaitBody(_Body):
    rollout_ids: list[str]
    timeout: Optional[Seconds] = None


class StoreRoute(APIRoute):
    """Route whose errors (validation, store exceptions, bugs) always become JSON responses."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return Response(
                    error_body(f"invalid request: {describe_validation(exc)}", "ValidationError"),
                    status_code=422,
                    media_type=JSON_MEDIA_TYPE,
                )
            except StarletteHTTPException as exc:
                return Response(
                    error_body(str(exc.detail), "HTTPError"), status_code=exc.status_code, media_type=JSON_MEDIA_TYPE
                )
            except Exception as exc:
                status, body = error_from_exception(exc)
                return Response(body, status_code=status, media_type=JSON_MEDIA_TYPE)

        return guarded


async def missing_or(exc: Exception, exists: Callable[[], Awaitable[bool]]) -> Exception:
    """`exc` as a 404 when the entity the request names does not exist, else unchanged (error path only)."""
    try:
        if not await exists():
            return HTTPError(404, str(exc.args[0]) if exc.args else str(exc), type(exc).__name__)
    except Exception:
        pass
    return exc


async def attempt_exists(store: LightningStore, rollout_id: str, attempt_id: str) -> bool:
    """Whether the rollout has that attempt (`attempt_id` may be "latest"); used on error paths only."""
    if attempt_id == "latest":
        return await store.get_latest_attempt(rollout_id) is not None
    return any(a.attempt_id == attempt_id for a in await store.query_attempts(rollout_id))


async def attempts_exist(store: LightningStore, pairs: set[tuple[str, str]]) -> bool:
    for rollout_id, attempt_id in pairs:
        if not await attempt_exists(store, rollout_id, attempt_id):
            return False
    return True
