"""Rows to models and back: the column lists the store selects and JSON encoding of documents."""

from __future__ import annotations

import json
from typing import Any, Optional

import pydantic_core

from agentlightning.types import (
    Attempt,
    AttemptedRollout,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    Span,
    Worker,
)

from .engine import Row

__all__ = [
    "ROLLOUT_COLUMNS",
    "ATTEMPT_COLUMNS",
    "WORKER_COLUMNS",
    "RESOURCES_COLUMNS",
    "to_json",
    "to_json_or_none",
    "from_json_or_none",
    "rollout_from_row",
    "attempted_rollout_from_row",
    "attempt_from_row",
    "worker_from_row",
    "resources_from_row",
    "span_from_row",
    "prefixed",
]

ROLLOUT_COLUMNS = "rollout_id, input, start_time, end_time, mode, resources_id, status, config, metadata"
ATTEMPT_COLUMNS = (
    "rollout_id, attempt_id, sequence_id, start_time, end_time, status, worker_id, last_heartbeat_time, metadata"
)
WORKER_COLUMNS = (
    "worker_id, status, heartbeat_stats, last_heartbeat_time, last_dequeue_time, last_busy_time, "
    "last_idle_time, current_rollout_id, current_attempt_id"
)
RESOURCES_COLUMNS = "resources_id, create_time, update_time, version, resources"
_ROLLOUT_WIDTH = len(ROLLOUT_COLUMNS.split(","))


def prefixed(columns: str, alias: str) -> str:
    """`"a, b"` -> `"x.a, x.b"`, for joins."""
    return ", ".join(f"{alias}.{column.strip()}" for column in columns.split(","))


def to_json(value: Any) -> str:
    """JSON text of a document; fails with the offending type named when it is not JSON-serialisable."""
    try:
        return pydantic_core.to_json(value).decode()
    except pydantic_core.PydanticSerializationError as exc:
        raise ValueError(f"SQL stores keep values as JSON and cannot serialise {type(value).__name__}: {exc}") from exc


def to_json_or_none(value: Any) -> Optional[str]:
    return None if value is None else to_json(value)


def from_json_or_none(text: Optional[str]) -> Any:
    return None if text is None else json.loads(text)


def rollout_from_row(row: Row) -> Rollout:
    return Rollout(
        rollout_id=row[0],
        input=json.loads(row[1]),
        start_time=row[2],
        end_time=row[3],
        mode=row[4],
        resources_id=row[5],
        status=row[6],
        config=RolloutConfig.model_validate_json(row[7]),
        metadata=from_json_or_none(row[8]),
    )


def attempt_from_row(row: Row, start: int = 0) -> Attempt:
    return Attempt(
        rollout_id=row[start],
        attempt_id=row[start + 1],
        sequence_id=row[start + 2],
        start_time=row[start + 3],
        end_time=row[start + 4],
        status=row[start + 5],
        worker_id=row[start + 6],
        last_heartbeat_time=row[start + 7],
        metadata=from_json_or_none(row[start + 8]),
    )


def attempted_rollout_from_row(row: Row) -> Rollout:
    """A rollout row followed by its latest attempt's columns (all NULL when it has no attempt yet)."""
    rollout = rollout_from_row(row)
    if row[_ROLLOUT_WIDTH] is None:
        return rollout
    return AttemptedRollout.model_validate({**rollout.__dict__, "attempt": attempt_from_row(row, _ROLLOUT_WIDTH)})


def worker_from_row(row: Row) -> Worker:
    return Worker(
        worker_id=row[0],
        status=row[1],
        heartbeat_stats=from_json_or_none(row[2]),
        last_heartbeat_time=row[3],
        last_dequeue_time=row[4],
        last_busy_time=row[5],
        last_idle_time=row[6],
        current_rollout_id=row[7],
        current_attempt_id=row[8],
    )


def resources_from_row(row: Row) -> ResourcesUpdate:
    return ResourcesUpdate(
        resources_id=row[0],
        create_time=row[1],
        update_time=row[2],
        version=row[3],
        resources=json.loads(row[4]),
    )


def span_from_row(row: Row) -> Span:
    return Span.model_validate_json(row[0])
