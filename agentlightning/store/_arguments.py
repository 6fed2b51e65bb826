"""The arguments of store calls, checked and coerced once for every backend.

Each function raises a `ValueError` that names the bad value and what to pass instead, and returns plain
data (a change dict, a rollout draft, query filters) that a backend then applies to its own storage.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import BaseModel

from agentlightning.types.core import (
    EnqueueRolloutRequest,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    TaskInput,
)
from agentlightning.types.tracer import Span

from ._finite import (
    check_dequeue_wait,
    check_finite,
    check_finite_number,
    check_wait_timeout,
    encode_non_finite,
    finite_span,
)
from .base import UnknownEntityError, is_unset
from .utils import (
    check_attempt_status,
    check_filter_logic,
    check_mode,
    check_pagination,
    check_rollout_status,
    check_sort,
    check_worker_status,
    merge_status_filters,
    new_rollout_id,
)

__all__ = [
    "coerce_config",
    "coerce_metadata",
    "coerce_stats",
    "coerce_span",
    "coerce_spans",
    "RolloutDraft",
    "rollout_draft",
    "enqueue_drafts",
    "rollout_changes",
    "attempt_changes",
    "worker_changes",
    "check_text",
    "check_worker_id",
    "check_dequeue_limit",
    "check_dequeue_wait",
    "check_wait_timeout",
    "check_resources_id",
    "check_resources",
    "check_resources_reference",
    "check_query",
    "rollout_query_filters",
    "worker_status_filter",
    "span_field_filters",
    "rollout_not_found",
    "attempt_not_found",
    "no_attempts_yet",
    "span_rollout_not_found",
    "span_attempt_not_found",
]


# ---- values ----


def coerce_config(config: Any) -> RolloutConfig:
    """A private copy of the config (None means the defaults); a dict is validated into one."""
    if config is None:
        return RolloutConfig()
    if isinstance(config, RolloutConfig):
        return config.model_copy(deep=True)
    if isinstance(config, dict):
        return RolloutConfig.model_validate(config)
    raise ValueError(f"config must be a RolloutConfig or a dict, got {type(config).__name__}")


def coerce_metadata(metadata: Any, what: str = "metadata") -> Optional[dict[str, Any]]:
    """A private deep copy of a metadata-like dict, so later edits by the caller do not leak into the store.

    NaN and infinity are refused (see `_finite`).
    """
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise ValueError(f"{what} must be a dict or None, got {type(metadata).__name__}")
    check_finite(metadata, what)
    return copy.deepcopy(metadata)


def coerce_stats(stats: Any, what: str = "heartbeat_stats") -> Optional[dict[str, Any]]:
    """A private copy of telemetry: like `coerce_metadata`, but NaN and infinity are kept as strings."""
    if stats is None:
        return None
    if not isinstance(stats, dict):
        raise ValueError(f"{what} must be a dict or None, got {type(stats).__name__}")
    encoded = encode_non_finite(stats)
    return copy.deepcopy(encoded) if encoded is stats else encoded


def check_text(field: str, value: Any) -> None:
    """Refuse a NUL byte in an id or name the store writes: PostgreSQL text cannot hold one, so no backend takes it."""
    if isinstance(value, str) and "\x00" in value:
        raise ValueError(f"{field} must not contain NUL bytes (\\x00), got {value!r}")


_SPAN_TEXT_FIELDS = ("rollout_id", "attempt_id", "trace_id", "span_id", "parent_id", "name")


def coerce_span(span: Any) -> Span:
    """The span to store: NUL bytes in its ids refused, NaN / infinity in its telemetry written as strings."""
    if isinstance(span, dict):
        span = Span.model_validate(span)
    elif not isinstance(span, Span):
        raise ValueError(f"expected a Span, got {type(span).__name__}")
    for field in _SPAN_TEXT_FIELDS:
        value = getattr(span, field)
        if isinstance(value, str) and "\x00" in value:  # check_text inlined: it runs for every span
            check_text(field, value)
    return finite_span(span)


def coerce_spans(spans: Sequence[Any]) -> list[Span]:
    return [coerce_span(span) for span in spans]


# ---- rollouts ----


@dataclass(frozen=True)
class RolloutDraft:
    """A new rollout's checked arguments; `resources_id` is as requested (the store resolves it)."""

    input: TaskInput
    mode: Optional[RolloutMode]
    resources_id: Optional[str]
    config: RolloutConfig
    metadata: Optional[dict[str, Any]]

    def build(self, status: RolloutStatus, resources_id: Optional[str], now: float) -> Rollout:
        """The rollout itself, with a fresh id, starting `now`."""
        # Validating the checked fields is cheaper than `model_construct`, whose field loop runs in Python.
        return Rollout.model_validate(
            {
                "rollout_id": new_rollout_id(),
                "input": self.input,
                "start_time": now,
                "end_time": None,
                "mode": self.mode,
                "resources_id": resources_id,
                "status": status,
                "config": self.config,
                "metadata": self.metadata,
            }
        )


def rollout_draft(
    input: TaskInput,
    mode: Any = None,
    resources_id: Optional[str] = None,
    config: Any = None,
    metadata: Any = None,
) -> RolloutDraft:
    """The arguments of `start_rollout` / `enqueue_rollout`, checked."""
    check_mode(mode)
    check_finite(input, "input")
    return RolloutDraft(input, mode, resources_id, coerce_config(config), coerce_metadata(metadata))


def enqueue_drafts(rollouts: Sequence[Any]) -> list[RolloutDraft]:
    """The requests of `enqueue_many_rollouts` (models or dicts), all checked before any is stored."""
    requests = [
        r if isinstance(r, EnqueueRolloutRequest) else EnqueueRolloutRequest.model_validate(r) for r in rollouts
    ]
    return [rollout_draft(r.input, r.mode, r.resources_id, r.config, r.metadata) for r in requests]


def rollout_changes(input: Any, mode: Any, status: Any, config: Any, metadata: Any) -> dict[str, Any]:
    """The fields `update_rollout` sets (UNSET ones are left out); `status` is included when given."""
    changes: dict[str, Any] = {}
    if not is_unset(input):
        check_finite(input, "input")
        changes["input"] = input
    if not is_unset(mode):
        check_mode(mode)
        changes["mode"] = mode
    if not is_unset(status):
        check_rollout_status(status)
    if not is_unset(config):
        if config is None:
            raise ValueError("config may not be None; pass a RolloutConfig (or leave it out)")
        changes["config"] = coerce_config(config)
    if not is_unset(metadata):
        changes["metadata"] = coerce_metadata(metadata)
    if not is_unset(status):
        changes["status"] = status
    return changes


def check_dequeue_limit(limit: Any) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise ValueError(f"limit must be an integer, got {limit!r}")


def check_worker_id(worker_id: Any) -> None:
    """An optional worker id a call records (dequeue, start, attempt hand-over)."""
    if worker_id is not None and not isinstance(worker_id, str):
        raise ValueError(f"worker_id must be a string or None, got {type(worker_id).__name__}")
    check_text("worker_id", worker_id)


def check_run(run: Any) -> None:
    """An optional run name a dequeue is limited to (`metadata["agl_run"]` of the rollouts it may claim)."""
    if run is not None and not isinstance(run, str):
        raise ValueError(f"run must be a string or None, got {type(run).__name__}")
    if run == "":
        raise ValueError("run must not be empty; pass None to claim the rollouts of every run")
    check_text("run", run)


# ---- attempts and workers ----


def attempt_changes(status: Any, worker_id: Any, last_heartbeat_time: Any, metadata: Any) -> dict[str, Any]:
    """The fields `update_attempt` sets (UNSET ones are left out)."""
    changes: dict[str, Any] = {}
    if not is_unset(status):
        check_attempt_status(status)
        changes["status"] = status
    if not is_unset(worker_id):
        check_worker_id(worker_id)
        changes["worker_id"] = worker_id
    if not is_unset(last_heartbeat_time):
        if last_heartbeat_time is not None and (
            not isinstance(last_heartbeat_time, (int, float)) or isinstance(last_heartbeat_time, bool)
        ):
            raise ValueError(f"last_heartbeat_time must be a number or None, got {last_heartbeat_time!r}")
        check_finite_number(last_heartbeat_time, "last_heartbeat_time")
        changes["last_heartbeat_time"] = last_heartbeat_time
    if not is_unset(metadata):
        changes["metadata"] = coerce_metadata(metadata)
    return changes


def worker_changes(worker_id: Any, heartbeat_stats: Any) -> dict[str, Any]:
    """The fields `update_worker` sets besides the heartbeat time the store stamps."""
    if not isinstance(worker_id, str) or not worker_id:
        raise ValueError(f"worker_id must be a non-empty string, got {worker_id!r}")
    check_text("worker_id", worker_id)
    changes: dict[str, Any] = {}
    if not is_unset(heartbeat_stats):
        changes["heartbeat_stats"] = coerce_stats(heartbeat_stats)
    return changes


# ---- resources ----


def check_resources_id(resources_id: Any) -> None:
    """An id to create or replace resources under."""
    if not isinstance(resources_id, str) or not resources_id:
        raise ValueError(f"resources_id must be a non-empty string, got {resources_id!r}")
    check_text("resources_id", resources_id)


def check_resources(resources: Any) -> None:
    """Named resources to store: a mapping whose values hold no NaN or infinity."""
    if not isinstance(resources, Mapping):
        raise ValueError(f"resources must be a dict of name -> resource, got {type(resources).__name__}")
    for name, resource in resources.items():  # type: ignore[union-attr]
        document = resource.model_dump() if isinstance(resource, BaseModel) else resource
        check_finite(document, f"resources[{name!r}]")


def check_resources_reference(resources_id: Any) -> None:
    """An id a rollout refers to; the resources may be added under it later (as in v0.3)."""
    if not isinstance(resources_id, str):
        raise ValueError(f"resources_id must be a string, got {type(resources_id).__name__}")
    check_text("resources_id", resources_id)


# ---- queries ----


@dataclass(frozen=True)
class Page:
    """The sorting and paging of a `query_*` call, checked."""

    sort_by: Optional[str]
    sort_order: str
    limit: int
    offset: int


def check_query(
    entity: str,
    sort_by: Optional[str],
    sort_order: str,
    limit: int,
    offset: int,
    filter_logic: Optional[str] = None,
) -> Page:
    """The arguments every `query_*` call shares, checked; `filter_logic` only where the query takes one."""
    if filter_logic is not None:
        check_filter_logic(filter_logic)
    check_sort(entity, sort_by, sort_order)
    check_pagination(limit, offset)
    return Page(sort_by, sort_order, limit, offset)


def rollout_query_filters(
    status_in: Optional[Sequence[str]],
    status: Optional[Sequence[str]],
    rollout_id_in: Optional[Sequence[str]],
    rollout_ids: Optional[Sequence[str]],
) -> tuple[Optional[list[str]], Optional[list[str]]]:
    """The statuses and ids `query_rollouts` filters by, each merged with its deprecated alias."""
    statuses = merge_status_filters(status_in, status)
    for value in statuses or []:
        check_rollout_status(value)
    return statuses, merge_status_filters(rollout_id_in, rollout_ids)


def worker_status_filter(status_in: Optional[Sequence[str]]) -> Optional[list[str]]:
    if status_in is None:
        return None
    for value in status_in:
        check_worker_status(value)
    return list(status_in)


SpanFieldFilters = tuple[tuple[str, Optional[str], Optional[str]], ...]
"""`(field, exact, contains)` for each span field `query_spans` filters by."""


def span_field_filters(
    trace_id: Optional[str],
    trace_id_contains: Optional[str],
    span_id: Optional[str],
    span_id_contains: Optional[str],
    parent_id: Optional[str],
    parent_id_contains: Optional[str],
    name: Optional[str],
    name_contains: Optional[str],
) -> SpanFieldFilters:
    return (
        ("trace_id", trace_id, trace_id_contains),
        ("span_id", span_id, span_id_contains),
        ("parent_id", parent_id, parent_id_contains),
        ("name", name, name_contains),
    )


# ---- references to things that do not exist ----


def rollout_not_found(rollout_id: str) -> ValueError:
    return UnknownEntityError(f"rollout {rollout_id!r} not found; was it enqueued in this store?")


def no_attempts_yet(rollout_id: str) -> ValueError:
    return UnknownEntityError(f"rollout {rollout_id!r} has no attempts yet; dequeue or start one first")


def attempt_not_found(rollout_id: str, attempt_id: str) -> ValueError:
    return UnknownEntityError(f"attempt {attempt_id!r} not found in rollout {rollout_id!r}")


def span_rollout_not_found(span: Span) -> ValueError:
    return UnknownEntityError(f"span {span.span_id!r} refers to rollout {span.rollout_id!r}, which does not exist")


def span_attempt_not_found(span: Span) -> ValueError:
    return UnknownEntityError(
        f"span {span.span_id!r} refers to attempt {span.attempt_id!r}, which does not exist in "
        f"rollout {span.rollout_id!r}"
    )
