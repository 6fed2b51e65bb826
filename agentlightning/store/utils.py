"""Rules every store backend shares: status propagation, the watchdog check, ids and query validation.

Backends keep their data however they like, but they decide *what* happens with these pure functions
(combined into whole transitions by `store.transitions`, arguments checked by `store._arguments`), so
the state machine of SPEC 3.2 / Appendix B lives in exactly one place.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union, overload

from pydantic import BaseModel

from agentlightning.semconv import AGL_RUN
from agentlightning.types import (
    ATTEMPT_STATUSES,
    QUEUING_ROLLOUT_STATUSES,
    ROLLOUT_MODES,
    ROLLOUT_STATUSES,
    TERMINAL_ROLLOUT_STATUSES,
    WORKER_STATUSES,
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    Rollout,
    RolloutConfig,
    RolloutStatus,
    Span,
    WorkerStatus,
)
from agentlightning.utils.id import generate_id

if TYPE_CHECKING:
    from .base import LightningStore

__all__ = [
    "copy_model",
    "Clock",
    "LATENCY_BUCKETS",
    "UpdateRolloutStatus",
    "UpdateAttemptStatus",
    "SORTABLE_FIELDS",
    "new_rollout_id",
    "new_attempt_id",
    "new_resources_id",
    "rollout_status_from_attempt",
    "rollout_status_for_attempt",
    "scan_unhealthy_rollouts",
    "unhealthy_attempt_status",
    "worker_status_from_attempt",
    "is_terminal",
    "is_queuing",
    "run_of",
    "check_rollout_status",
    "check_attempt_status",
    "check_worker_status",
    "check_mode",
    "check_pagination",
    "check_sort",
    "check_filter_logic",
    "sort_key",
    "paginate",
    "merge_status_filters",
    "count_unsequenced_spans",
    "assign_sequence_ids",
]

Clock = Callable[[], float]
"""Returns the current time in seconds; stores take one so tests can move time without sleeping."""

UpdateRolloutStatus = Callable[[str, RolloutStatus], Awaitable[Rollout]]
"""v0.3's type of a callback setting a rollout's status."""
UpdateAttemptStatus = Callable[[str, str, AttemptStatus], Awaitable[Attempt]]
"""v0.3's type of a callback setting an attempt's status."""

# Histogram buckets (seconds) of the store's call latencies, as in v0.3: 1 µs to 5 minutes.
# fmt: off
LATENCY_BUCKETS: list[float] = [
    0.000001, 0.000002, 0.000005, 0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.003,
    0.005, 0.007, 0.01, 0.015, 0.02, 0.03, 0.05, 0.07, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 2.0, 3.0, 5.0, 7.0,
    10.0, 12.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0,
]
# fmt: on

# Fields a query may sort by, per entity. Only scalar columns: sorting by a dict is meaningless.
SORTABLE_FIELDS: dict[str, tuple[str, ...]] = {
    "rollout": ("rollout_id", "start_time", "end_time", "mode", "resources_id", "status"),
    "attempt": (
        "rollout_id",
        "attempt_id",
        "sequence_id",
        "start_time",
        "end_time",
        "status",
        "worker_id",
        "last_heartbeat_time",
    ),
    "span": (
        "rollout_id",
        "attempt_id",
        "sequence_id",
        "trace_id",
        "span_id",
        "parent_id",
        "name",
        "start_time",
        "end_time",
    ),
    "resources": ("resources_id", "create_time", "update_time", "version"),
    "worker": (
        "worker_id",
        "status",
        "last_heartbeat_time",
        "last_dequeue_time",
        "last_busy_time",
        "last_idle_time",
        "current_rollout_id",
        "current_attempt_id",
    ),
}

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

_set_attribute = object.__setattr__


def copy_model(model: M, changes: Optional[dict[str, Any]] = None) -> M:
    """A shallow copy of a validated model with `changes` applied: `model.model_copy(update=changes)`, cheaper.

    The store copies a rollout, attempt or worker on most calls (its rows are never changed in place, and
    callers get their own copies); pydantic's `model_copy` spends most of its time in generic `copy.copy`
    dispatch. Models with extra fields or private attributes take pydantic's own path.
    """
    if model.__pydantic_extra__ or model.__pydantic_private__:
        return model.model_copy(update=changes)
    cls = type(model)
    copied = cls.__new__(cls)
    fields = model.__dict__.copy()
    fields_set = model.__pydantic_fields_set__.copy()
    if changes:
        fields.update(changes)
        fields_set.update(changes)
    _set_attribute(copied, "__dict__", fields)
    _set_attribute(copied, "__pydantic_fields_set__", fields_set)
    _set_attribute(copied, "__pydantic_extra__", None)
    _set_attribute(copied, "__pydantic_private__", None)
    return copied


def new_rollout_id() -> str:
    return "ro-" + generate_id(12)


def new_attempt_id() -> str:
    return "at-" + generate_id(8)


def new_resources_id() -> str:
    return "rs-" + generate_id(12)


def is_terminal(status: str) -> bool:
    return status in TERMINAL_ROLLOUT_STATUSES


def is_queuing(status: str) -> bool:
    return status in QUEUING_ROLLOUT_STATUSES


def run_of(rollout: Rollout) -> Optional[str]:
    """The run that created the rollout (`metadata["agl_run"]`, set by `Trainer.fit`/`dev`), if any."""
    run = (rollout.metadata or {}).get(AGL_RUN)
    return run if isinstance(run, str) else None


def rollout_status_for_attempt(attempt: Attempt, config: RolloutConfig) -> RolloutStatus:
    """The rollout status implied by its latest attempt's status (the stores' synchronous rule).

    Failures (failed / timeout / unresponsive) requeue only when the status is listed in
    `retry_condition` and attempts remain (`sequence_id < max_attempts`); otherwise the rollout fails.
    """
    status = attempt.status
    if status in ("preparing", "running", "succeeded"):
        return status  # type: ignore[return-value]
    if status not in ("failed", "timeout", "unresponsive"):
        raise ValueError(f"Invalid attempt status: {status!r}")
    if status in config.retry_condition and attempt.sequence_id < config.max_attempts:
        return "requeuing"
    return "failed"


async def rollout_status_from_attempt(attempt: Attempt, config: RolloutConfig) -> RolloutStatus:
    """v0.3's coroutine form of `rollout_status_for_attempt`: `await rollout_status_from_attempt(a, config)`."""
    return rollout_status_for_attempt(attempt, config)


def unhealthy_attempt_status(attempt: Attempt, config: RolloutConfig, now: float) -> Optional[AttemptStatus]:
    """The watchdog verdict for a live attempt: "timeout", "unresponsive", or None when healthy.

    Timeout counts from the attempt start; unresponsiveness from the last heartbeat (a span or an explicit
    `last_heartbeat_time`), or from the start when there has been none.
    """
    if attempt.status not in ("preparing", "running"):
        return None
    if config.timeout_seconds is not None and now - attempt.start_time > config.timeout_seconds:
        return "timeout"
    if config.unresponsive_seconds is not None:
        since = attempt.last_heartbeat_time if attempt.last_heartbeat_time is not None else attempt.start_time
        if now - since > config.unresponsive_seconds:
            return "unresponsive"
    return None


@overload
async def scan_unhealthy_rollouts(store: LightningStore, now: Optional[float] = None) -> None: ...


@overload
async def scan_unhealthy_rollouts(
    store: Sequence[AttemptedRollout], now: Optional[float] = None
) -> dict[tuple[str, str], AttemptStatus]: ...


async def scan_unhealthy_rollouts(
    store: Union[LightningStore, Sequence[AttemptedRollout]], now: Optional[float] = None
) -> Optional[dict[tuple[str, str], AttemptStatus]]:
    """Run the watchdog once over `store`: mark stale latest attempts `timeout` / `unresponsive`.

    Backends of this package run their own scan (in one transaction, on the store's clock when `now` is
    None). Any other `LightningStore` is scanned through its public API: live rollouts, their latest
    attempt, `unhealthy_attempt_status`, then `update_attempt`, so the usual retry/requeue rules apply.

    Given a list of running `AttemptedRollout`s instead (v0.3's form), nothing is changed: the verdicts are
    returned as `{(rollout_id, attempt_id): "timeout" | "unresponsive"}` for the caller to apply.
    """
    if isinstance(store, Sequence):
        at = time.time() if now is None else now
        verdicts: dict[tuple[str, str], AttemptStatus] = {}
        for rollout in store:
            verdict = unhealthy_attempt_status(rollout.attempt, rollout.config, at)
            if verdict is not None:
                verdicts[(rollout.attempt.rollout_id, rollout.attempt.attempt_id)] = verdict
        return verdicts
    await _scan_store(store, now)
    return None


async def _scan_store(store: LightningStore, now: Optional[float]) -> None:
    backend_scan = getattr(store, "_scan_unhealthy", None)
    if backend_scan is not None:
        clock: Clock = getattr(store, "_clock", time.time)
        await backend_scan(clock() if now is None else now)
        return
    now = time.time() if now is None else now
    live = await store.query_rollouts(status_in=["preparing", "running"])
    for rollout in live:
        config = rollout.config
        if config.timeout_seconds is None and config.unresponsive_seconds is None:
            continue
        attempt = await store.get_latest_attempt(rollout.rollout_id)
        if attempt is None:
            continue
        verdict = unhealthy_attempt_status(attempt, config, now)
        if verdict is not None:
            await store.update_attempt(rollout.rollout_id, attempt.attempt_id, status=verdict)


def worker_status_from_attempt(status: AttemptStatus) -> WorkerStatus:
    if status in ("succeeded", "failed"):
        return "idle"
    if status in ("unresponsive", "timeout"):
        return "unknown"
    return "busy"


def _check_choice(kind: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"invalid {kind} {value!r}; expected one of {', '.join(choices)}")


def check_rollout_status(status: Any) -> None:
    _check_choice("rollout status", status, ROLLOUT_STATUSES)


def check_attempt_status(status: Any) -> None:
    _check_choice("attempt status", status, ATTEMPT_STATUSES)


def check_worker_status(status: Any) -> None:
    _check_choice("worker status", status, WORKER_STATUSES)


def check_mode(mode: Any) -> None:
    if mode is not None:
        _check_choice("rollout mode", mode, ROLLOUT_MODES)


def check_pagination(limit: int, offset: int) -> None:
    # limit=0 is a valid (empty) page: callers use it to read only `total`.
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < -1:
        raise ValueError(f"limit must be -1 (no limit) or a non-negative integer, got {limit!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"offset must be a non-negative integer, got {offset!r}")


def check_sort(entity: str, sort_by: Optional[str], sort_order: Optional[str]) -> None:
    """`sort_order` None means ascending, as in v0.3."""
    if sort_order not in ("asc", "desc", None):
        raise ValueError(f"sort_order must be 'asc' or 'desc', got {sort_order!r}")
    if sort_by is not None and sort_by not in SORTABLE_FIELDS[entity]:
        raise ValueError(f"cannot sort {entity} by {sort_by!r}; sortable fields: {', '.join(SORTABLE_FIELDS[entity])}")


def check_filter_logic(filter_logic: str) -> None:
    if filter_logic not in ("and", "or"):
        raise ValueError(f"filter_logic must be 'and' or 'or', got {filter_logic!r}")


def sort_key(value: Any) -> tuple[int, Any]:
    """Key that orders None before every value (so None is first ascending, last descending)."""
    return (0, 0) if value is None else (1, value)


def paginate(items: list[T], limit: int, offset: int) -> list[T]:
    if limit == -1:
        return items[offset:]
    return items[offset : offset + limit]


def merge_status_filters(primary: Optional[Iterable[str]], deprecated: Optional[Iterable[str]]) -> Optional[list[str]]:
    """The filter to apply given a filter and its deprecated alias (`status` for `status_in`, `rollout_ids`
    for `rollout_id_in`): the `*_in` filter wins when both are given, as in v0.3."""
    if primary is not None:
        return list(primary)
    return None if deprecated is None else list(deprecated)


def now_from(clock: Optional[Clock]) -> float:
    return (clock or time.time)()


def count_unsequenced_spans(spans: Iterable[Span]) -> dict[str, int]:
    """Per rollout, how many spans arrive without a sequence id (a negative one: the store allocates one)."""
    missing: dict[str, int] = {}
    for span in spans:
        if span.sequence_id < 0:
            missing[span.rollout_id] = missing.get(span.rollout_id, 0) + 1
    return missing


def assign_sequence_ids(spans: Sequence[Span], first_ids: dict[str, int]) -> list[Span]:
    """Copies of the unsequenced spans numbered from `first_ids[rollout_id]` on, in batch order; others as given."""
    next_ids = dict(first_ids)
    assigned: list[Span] = []
    for span in spans:
        if span.sequence_id >= 0:
            assigned.append(span)
            continue
        assigned.append(span.model_copy(update={"sequence_id": next_ids[span.rollout_id]}))
        next_ids[span.rollout_id] += 1
    return assigned
