"""How each `LightningStore` method travels over HTTP for `LightningStoreClient`: paths and response types."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Optional, Union
from urllib.parse import quote

from pydantic import TypeAdapter

from agentlightning.types import (
    Attempt,
    AttemptedRollout,
    FinishedAttempt,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    Span,
    Worker,
)

from ._resources_hint import WANT_RESOURCES_VERSIONS_HEADER
from .errors import LightningStoreRequestError

_ANY: TypeAdapter[Any] = TypeAdapter(Any)
_ROLLOUT: TypeAdapter[Rollout] = TypeAdapter(Rollout)
_ROLLOUTS: TypeAdapter[list[Rollout]] = TypeAdapter(list[Rollout])
_ANY_ROLLOUT: TypeAdapter[Union[AttemptedRollout, Rollout]] = TypeAdapter(Union[AttemptedRollout, Rollout])
_ATTEMPTED: TypeAdapter[AttemptedRollout] = TypeAdapter(AttemptedRollout)
_ATTEMPTED_LIST: TypeAdapter[list[AttemptedRollout]] = TypeAdapter(list[AttemptedRollout])
_ROLLOUT_PAGE: TypeAdapter[PaginatedResult[Union[AttemptedRollout, Rollout]]] = TypeAdapter(
    PaginatedResult[Union[AttemptedRollout, Rollout]]
)
_ATTEMPT: TypeAdapter[Attempt] = TypeAdapter(Attempt)
_ATTEMPT_PAGE: TypeAdapter[PaginatedResult[Attempt]] = TypeAdapter(PaginatedResult[Attempt])
_SPAN: TypeAdapter[Span] = TypeAdapter(Span)
_OPTIONAL_SPAN: TypeAdapter[Optional[Span]] = TypeAdapter(Optional[Span])  # null: a duplicate, not stored
_SPANS: TypeAdapter[list[Span]] = TypeAdapter(list[Span])
_SPAN_PAGE: TypeAdapter[PaginatedResult[Span]] = TypeAdapter(PaginatedResult[Span])
_RESOURCES: TypeAdapter[ResourcesUpdate] = TypeAdapter(ResourcesUpdate)
_RESOURCES_PAGE: TypeAdapter[PaginatedResult[ResourcesUpdate]] = TypeAdapter(PaginatedResult[ResourcesUpdate])
_WORKER: TypeAdapter[Worker] = TypeAdapter(Worker)
_WORKER_PAGE: TypeAdapter[PaginatedResult[Worker]] = TypeAdapter(PaginatedResult[Worker])
_DICT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])
_FINISHED: TypeAdapter[FinishedAttempt] = TypeAdapter(FinishedAttempt)

_JSON_HEADERS = {"Content-Type": "application/json"}
_DEQUEUE_HEADERS = {**_JSON_HEADERS, WANT_RESOURCES_VERSIONS_HEADER: "1"}


def _seg(value: str, what: str = "id") -> str:
    """`value` as one URL path segment; an empty id is refused here, as the store would refuse it."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    return quote(value, safe="")


def _json_value(value: Any) -> Any:
    """Sequences (tuples, pages) as JSON lists; anything else as is."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, list)):
        return list(value)  # type: ignore[arg-type]
    return value


def _route_missing(error: LightningStoreRequestError) -> bool:
    """Whether a server answered that it has no such route (an older version), not that an entity is missing."""
    return error.status in (404, 405) and not error.error_type


@dataclasses.dataclass(frozen=True)
class _Endpoint:
    """How a contract method travels over HTTP.

    `{name}` in `path` takes the argument `name` (one escaped path segment). The other arguments form
    the JSON body (those left UNSET are omitted, so the store leaves the field unchanged), or the URL
    query with `query=True`; `body_from` sends one argument as the whole body instead. With
    `optional=True` a 'not found' answer or `null` means None, as the contract's `Optional` returns.
    """

    method: str
    path: str
    adapter: TypeAdapter[Any]
    optional: bool = False
    query: bool = False
    body_from: Optional[str] = None

    def path_names(self) -> list[str]:
        return [part[1:-1] for part in self.path.split("/") if part.startswith("{")]


_ENDPOINTS: dict[str, _Endpoint] = {
    "statistics": _Endpoint("GET", "/statistics", _DICT),
    "start_rollout": _Endpoint("POST", "/rollouts", _ATTEMPTED),
    "start_attempt": _Endpoint("POST", "/rollouts/{rollout_id}/attempts", _ATTEMPTED),
    "query_rollouts": _Endpoint("POST", "/rollouts/search", _ROLLOUT_PAGE),
    "get_rollout_by_id": _Endpoint("GET", "/rollouts/{rollout_id}", _ANY_ROLLOUT, optional=True),
    "update_rollout": _Endpoint("POST", "/rollouts/{rollout_id}", _ROLLOUT),
    "query_attempts": _Endpoint("POST", "/rollouts/{rollout_id}/attempts/search", _ATTEMPT_PAGE),
    "get_latest_attempt": _Endpoint("GET", "/rollouts/{rollout_id}/attempts/latest", _ATTEMPT, optional=True),
    "update_attempt": _Endpoint("POST", "/rollouts/{rollout_id}/attempts/{attempt_id}", _ATTEMPT),
    "add_span": _Endpoint("POST", "/spans", _OPTIONAL_SPAN, body_from="span"),
    "query_spans": _Endpoint("POST", "/spans/search", _SPAN_PAGE),
    "query_resources": _Endpoint("GET", "/resources", _RESOURCES_PAGE, query=True),
    "query_workers": _Endpoint("POST", "/workers/search", _WORKER_PAGE),
    "get_worker_by_id": _Endpoint("GET", "/workers/{worker_id}", _WORKER, optional=True),
    "update_worker": _Endpoint("POST", "/workers/{worker_id}", _WORKER),
}
