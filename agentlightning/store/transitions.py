"""The store's state machine (SPEC 3.2, Appendix B) as pure decisions, written once for every backend.

A backend reads the rows a call touches, asks these functions what follows from a change (the rollout's
new status and `end_time`, the queue, the worker, a span's heartbeat), and writes the answer to its own
storage. The collection store and the SQL store only *apply* these decisions, so they cannot drift apart.
The status rules the decisions rest on (`rollout_status_from_attempt`, ...) are in `store.utils`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from agentlightning.types import (
    QUEUING_ROLLOUT_STATUSES,
    TERMINAL_ROLLOUT_STATUSES,
    Attempt,
    AttemptedRollout,
    Rollout,
    RolloutStatus,
    Span,
)

from .utils import new_attempt_id, rollout_status_from_attempt, worker_status_from_attempt

__all__ = [
    "LIVE_ROLLOUT_STATUSES",
    "RolloutTransition",
    "rollout_transition",
    "attempted_rollout",
    "next_attempt",
    "stamp_attempt_changes",
    "rollout_status_after_attempt",
    "span_heartbeat_changes",
    "rollout_status_after_span",
    "worker_reassignment",
    "worker_stays_busy",
    "worker_claim_changes",
    "worker_release_changes",
    "worker_dequeue_changes",
    "sequence_floors",
]

LIVE_ROLLOUT_STATUSES: tuple[RolloutStatus, ...] = ("preparing", "running")
"""Rollouts whose latest attempt the watchdog checks for timeouts and silence."""


# ---- rollouts ----


@dataclass(slots=True)
class RolloutTransition:
    """What setting a rollout's status (with other field changes) means for the store.

    Attributes:
        changes: the fields to write, including `status` and `end_time` when the status changes.
        enqueue: the rollout must be in the queue (one already queued keeps its place).
        dequeue: the rollout must leave the queue.
        finished: the rollout just became terminal; wake its waiters once the change is stored.
    """

    changes: dict[str, Any]
    enqueue: bool
    dequeue: bool
    finished: bool


def rollout_transition(
    rollout: Rollout, status: RolloutStatus, now: float, changes: Optional[Mapping[str, Any]] = None
) -> RolloutTransition:
    """Set `status` (and `changes`): a terminal status stamps `end_time`, any other new status clears it."""
    fields = dict(changes) if changes else {}
    previous = rollout.status
    finished = False
    if status != previous:
        fields["status"] = status
        if status in TERMINAL_ROLLOUT_STATUSES:
            fields["end_time"] = now
            finished = True
        elif rollout.end_time is not None:
            fields["end_time"] = None
    # Runs on every status change, so the rules `is_queuing` / `is_terminal` are inlined as set lookups.
    enqueue = status in QUEUING_ROLLOUT_STATUSES
    return RolloutTransition(fields, enqueue, not enqueue and previous in QUEUING_ROLLOUT_STATUSES, finished)


def attempted_rollout(rollout: Rollout, attempt: Attempt) -> AttemptedRollout:
    # Both parts are validated models of the same rollout, so skip re-validation on this hot path.
    return AttemptedRollout.model_construct(**dict(rollout), attempt=attempt)


# ---- attempts ----


def next_attempt(rollout_id: str, sequence_id: int, worker_id: Optional[str], now: float) -> Attempt:
    """A rollout's new attempt; storing it makes the rollout `preparing` and claims the worker."""
    return Attempt(
        rollout_id=rollout_id,
        attempt_id=new_attempt_id(),
        sequence_id=sequence_id,
        start_time=now,
        worker_id=worker_id,
    )


def stamp_attempt_changes(changes: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The changes to write to an attempt: finishing it (succeeded / failed) stamps its `end_time`."""
    fields = dict(changes)
    if fields.get("status") in ("succeeded", "failed"):
        fields["end_time"] = now
    return fields


def rollout_status_after_attempt(rollout: Rollout, attempt: Attempt) -> Optional[RolloutStatus]:
    """The status a rollout takes when its *latest* attempt changed status; None when it keeps its own.

    A cancelled rollout stays cancelled whatever its attempts report afterwards.
    """
    if rollout.status == "cancelled":
        return None
    return rollout_status_from_attempt(attempt, rollout.config)


def span_heartbeat_changes(attempt: Attempt, now: float) -> dict[str, Any]:
    """A span is a heartbeat; the first one (or one after going unresponsive) also means `running`."""
    if attempt.status not in ("preparing", "unresponsive"):
        return {"last_heartbeat_time": now}
    return {"last_heartbeat_time": now, "status": "running"}


def rollout_status_after_span(rollout: Rollout) -> Optional[RolloutStatus]:
    """A span that starts its rollout's *latest* attempt starts a preparing / requeuing rollout; None otherwise."""
    return "running" if rollout.status in ("preparing", "requeuing") else None


# ---- workers ----


def worker_reassignment(attempt: Attempt, changes: Mapping[str, Any]) -> Optional[Attempt]:
    """The attempt as its new worker sees it when `changes` hand it to another worker (who must be claimed)."""
    worker_id = changes.get("worker_id")
    if worker_id is None or worker_id == attempt.worker_id:
        return None
    return attempt.model_copy(update={"worker_id": worker_id})


def worker_stays_busy(attempt: Attempt) -> bool:
    """Whether the attempt's worker is still busy with it (otherwise see `worker_release_changes`)."""
    return worker_status_from_attempt(attempt.status) == "busy"


def worker_claim_changes(attempt: Attempt, now: float) -> dict[str, Any]:
    """The worker fields that make it busy with this attempt."""
    return {
        "status": "busy",
        "last_busy_time": now,
        "current_rollout_id": attempt.rollout_id,
        "current_attempt_id": attempt.attempt_id,
    }


def worker_release_changes(attempt: Attempt, now: float, current_attempt_id: Optional[str]) -> Optional[dict[str, Any]]:
    """Worker fields once its attempt finished (-> idle) or went stale (-> unknown).

    None when the worker already moved on to another attempt (`current_attempt_id`) and must be left alone.
    """
    if current_attempt_id not in (None, attempt.attempt_id):
        return None
    status = worker_status_from_attempt(attempt.status)
    changes: dict[str, Any] = {"status": status}
    if status == "idle":
        changes.update(last_idle_time=now, current_rollout_id=None, current_attempt_id=None)
    return changes


def worker_dequeue_changes(claimed: bool, now: float) -> dict[str, Any]:
    """The worker fields a dequeue call records; one that found nothing to claim is idle."""
    if claimed:
        return {"last_dequeue_time": now}
    return {"last_dequeue_time": now, "status": "idle", "last_idle_time": now}


# ---- spans ----


def sequence_floors(spans: Sequence[Span]) -> dict[str, int]:
    """Per rollout, the highest sequence id the spans carry: the rollout's next allocated id must exceed it."""
    floors: dict[str, int] = {}
    for span in spans:
        if span.sequence_id > 0:
            floors[span.rollout_id] = max(floors.get(span.rollout_id, 0), span.sequence_id)
    return floors
