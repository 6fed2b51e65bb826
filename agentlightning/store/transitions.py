"""The store's state machine (SPEC 3.2, Appendix B) as pure decisions, written once for every backend.

A backend reads the rows a call touches, asks these functions what follows from a change (the rollout's
new status and `end_time`, the queue, the worker, a span's heartbeat), and writes the answer to its own
storage. The collection store and the SQL store only *apply* these decisions, so they cannot drift apart.
The status rules the decisions rest on (`rollout_status_for_attempt`, ...) are in `store.utils`.

Which status may follow which is written once, in `ALLOWED_TRANSITIONS`: finished rollouts and attempts stay
finished, and an attempt the store gave up on (timed out, unresponsive) or replaced by a newer one is *stale*:
its late updates are refused (`StaleAttemptError`, HTTP 409) and its late spans are kept but marked with
`AGL_STALE_ATTEMPT`, never moving the rollout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from agentlightning.semconv import AGL_STALE_ATTEMPT
from agentlightning.types import (
    QUEUING_ROLLOUT_STATUSES,
    TERMINAL_ROLLOUT_STATUSES,
    Attempt,
    AttemptedRollout,
    Rollout,
    RolloutStatus,
    Span,
)

from .utils import new_attempt_id, rollout_status_for_attempt, worker_status_from_attempt

__all__ = [
    "StateConflictError",
    "ForbiddenTransitionError",
    "StaleAttemptError",
    "ALLOWED_TRANSITIONS",
    "transition_allowed",
    "check_transition",
    "DIRECT_ROLLOUT_TRANSITIONS",
    "attempt_revived_by_span",
    "stale_attempt_reason",
    "check_attempt_update",
    "mark_stale_span",
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
    "worker_heartbeat_attempt_changes",
    "sequence_floors",
]

LIVE_ROLLOUT_STATUSES: tuple[RolloutStatus, ...] = ("preparing", "running")
"""Rollouts whose latest attempt the watchdog checks for timeouts and silence."""


# ---- which status may follow which ----


class StateConflictError(ValueError):
    """A change the state machine refuses because of what already happened (HTTP 409)."""


class ForbiddenTransitionError(StateConflictError):
    """The status change is not in `ALLOWED_TRANSITIONS` (e.g. a finished rollout asked to run again)."""


class StaleAttemptError(StateConflictError):
    """An update of an attempt the store no longer waits for: it timed out, went silent or was superseded."""


ALLOWED_TRANSITIONS: dict[str, dict[str, frozenset[str]]] = {
    "rollout": {
        # A queued rollout runs only through an attempt, so it becomes `preparing` before `running`.
        "queuing": frozenset({"preparing", "requeuing", "succeeded", "failed", "cancelled"}),
        "requeuing": frozenset({"queuing", "preparing", "succeeded", "failed", "cancelled"}),
        "preparing": frozenset({"running", "queuing", "requeuing", "succeeded", "failed", "cancelled"}),
        "running": frozenset({"preparing", "queuing", "requeuing", "succeeded", "failed", "cancelled"}),
        "succeeded": frozenset(),
        "failed": frozenset(),
        "cancelled": frozenset(),
    },
    "attempt": {
        "preparing": frozenset({"running", "succeeded", "failed", "unresponsive", "timeout"}),
        "running": frozenset({"succeeded", "failed", "unresponsive", "timeout"}),
        "succeeded": frozenset(),
        "failed": frozenset(),
        # The watchdog's verdicts are final: the rollout was requeued or failed on the strength of them.
        "unresponsive": frozenset(),
        "timeout": frozenset(),
    },
}
"""Per entity, the statuses each status may change to. Keeping the same status is always allowed (a repeat)."""

DIRECT_ROLLOUT_TRANSITIONS: dict[str, frozenset[str]] = {
    "queuing": frozenset({"running"}),
    "requeuing": frozenset({"running"}),
}
"""Rollout moves allowed only when made directly (`update_rollout`, or a span reviving its attempt), as in v0.3.

Never derived from an attempt's status report: a rollout requeued by hand stays queued until an attempt is
claimed, whatever its previous attempt says.
"""

_FINAL_HINTS = {
    "rollout": "a finished rollout is final; enqueue a new rollout to run the task again",
    "attempt": "a finished attempt is final; the store starts a new attempt when the rollout is retried",
}


def transition_allowed(entity: str, current: str, new: str, direct: bool = False) -> bool:
    if new == current or new in ALLOWED_TRANSITIONS[entity][current]:
        return True
    return direct and entity == "rollout" and new in DIRECT_ROLLOUT_TRANSITIONS.get(current, ())


def check_transition(entity: str, entity_id: str, current: str, new: str, direct: bool = False) -> None:
    """Raise `ForbiddenTransitionError` unless `entity` (rollout / attempt) may go from `current` to `new`.

    `direct`: the move is made by `update_rollout` (or a span reviving its attempt), which may also make the
    moves of `DIRECT_ROLLOUT_TRANSITIONS`.
    """
    if transition_allowed(entity, current, new, direct):
        return
    targets = ALLOWED_TRANSITIONS[entity][current] | (
        DIRECT_ROLLOUT_TRANSITIONS.get(current, frozenset()) if direct and entity == "rollout" else frozenset()
    )
    hint = (
        _FINAL_HINTS[entity]
        if not targets
        else f"from {current!r} it may only become {', '.join(repr(t) for t in sorted(targets))}"
    )
    raise ForbiddenTransitionError(f"{entity} {entity_id!r} cannot go from {current!r} to {new!r}: {hint}")


def attempt_revived_by_span(attempt: Attempt, rollout: Rollout, latest_sequence_id: int) -> bool:
    """Whether a span of this attempt brings it back from `unresponsive` to `running` (v0.3 does so).

    Only while nothing moved on without it: it is still its rollout's latest attempt and the rollout waits
    for a retry (`requeuing`, no new attempt claimed yet). The rollout then runs again with this attempt and
    leaves the queue. A rollout that already finished (`failed`: no retry left) keeps its result, and an
    attempt superseded by a newer one stays stale, so a rollout still never gets two succeeded attempts.
    """
    return (
        attempt.status == "unresponsive" and attempt.sequence_id >= latest_sequence_id and rollout.status == "requeuing"
    )


def stale_attempt_reason(attempt: Attempt, latest_sequence_id: int) -> Optional[str]:
    """Why the store no longer takes updates from this attempt, or None while it does.

    An attempt that finished on its own (succeeded / failed) is never stale: its late spans are just late.
    (A span can still revive an unresponsive attempt: see `attempt_revived_by_span`.)
    """
    if attempt.status in ("succeeded", "failed"):
        return None
    if attempt.status in ("timeout", "unresponsive"):
        return f"it was marked {attempt.status!r} and its rollout moved on (requeued or finished)"
    if attempt.sequence_id < latest_sequence_id:
        return f"a newer attempt (#{latest_sequence_id}) of its rollout superseded it"
    return None


def check_attempt_update(attempt: Attempt, latest_sequence_id: int, changes: Mapping[str, Any]) -> None:
    """Refuse any update of a stale attempt (`StaleAttemptError`) or a forbidden status change."""
    reason = stale_attempt_reason(attempt, latest_sequence_id)
    if reason is not None:
        raise StaleAttemptError(
            f"attempt {attempt.attempt_id!r} of rollout {attempt.rollout_id!r} is stale: {reason}; its updates "
            f"are refused and its late spans are kept, marked {AGL_STALE_ATTEMPT!r}"
        )
    status = changes.get("status")
    if status is not None:
        check_transition("attempt", attempt.attempt_id, attempt.status, status)


def mark_stale_span(span: Span) -> Span:
    """A copy of a late span of a stale attempt, flagged so readers can tell (or drop) it."""
    return span.model_copy(update={"attributes": {**span.attributes, AGL_STALE_ATTEMPT: True}})


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
    rollout: Rollout,
    status: RolloutStatus,
    now: float,
    changes: Optional[Mapping[str, Any]] = None,
    direct: bool = False,
) -> RolloutTransition:
    """Set `status` (and `changes`): a terminal status stamps `end_time`; a forbidden change raises.

    Only non-terminal rollouts change status (terminal ones are final), so none has an `end_time` to clear.
    `direct` (see `check_transition`) for `update_rollout` and span revivals.
    """
    fields = dict(changes) if changes else {}
    previous = rollout.status
    finished = False
    if status != previous:
        check_transition("rollout", rollout.rollout_id, previous, status, direct)
        fields["status"] = status
        if status in TERMINAL_ROLLOUT_STATUSES:
            fields["end_time"] = now
            finished = True
    # Runs on every status change, so the rules `is_queuing` / `is_terminal` are inlined as set lookups.
    enqueue = status in QUEUING_ROLLOUT_STATUSES
    return RolloutTransition(fields, enqueue, not enqueue and previous in QUEUING_ROLLOUT_STATUSES, finished)


def attempted_rollout(rollout: Rollout, attempt: Attempt) -> AttemptedRollout:
    # Validating from the field dict (pydantic keeps the Attempt instance as is) costs a third of
    # `model_construct(**dict(rollout))`: both `dict(model)` and `model_construct` run field loops in Python.
    return AttemptedRollout.model_validate({**rollout.__dict__, "attempt": attempt})


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


def stamp_attempt_changes(changes: Mapping[str, Any], now: float, attempt: Optional[Attempt] = None) -> dict[str, Any]:
    """The changes to write to an attempt: finishing it (succeeded / failed) stamps its `end_time`.

    Repeating the status the attempt already has (a retried request) keeps its first `end_time`.
    """
    fields = dict(changes)
    status = fields.get("status")
    if status in ("succeeded", "failed") and (attempt is None or attempt.status != status):
        fields["end_time"] = now
    return fields


def rollout_status_after_attempt(rollout: Rollout, attempt: Attempt) -> Optional[RolloutStatus]:
    """The status a rollout takes when its *latest* attempt changed status; None when it keeps its own.

    A finished rollout (cancelled included) stays as it is whatever its attempts report afterwards, and a
    rollout requeued by hand stays queued until an attempt is claimed (see `ALLOWED_TRANSITIONS`).
    """
    status = rollout_status_for_attempt(attempt, rollout.config)
    if status == rollout.status or not transition_allowed("rollout", rollout.status, status):
        return None
    return status


def span_heartbeat_changes(attempt: Attempt, now: float) -> dict[str, Any]:
    """A span is a heartbeat; the first one of a preparing attempt (or one reviving it) also means `running`."""
    if attempt.status not in ("preparing", "unresponsive"):
        return {"last_heartbeat_time": now}
    return {"last_heartbeat_time": now, "status": "running"}


def rollout_status_after_span(rollout: Rollout, revived: bool = False) -> Optional[RolloutStatus]:
    """A span that starts its rollout's *latest* attempt starts a preparing rollout; None otherwise.

    A span reviving the attempt (`attempt_revived_by_span`) takes its `requeuing` rollout back to `running`.
    """
    if rollout.status == "preparing" or (revived and rollout.status == "requeuing"):
        return "running"
    return None


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


def worker_heartbeat_attempt_changes(attempt: Attempt, worker_id: str, now: float) -> Optional[dict[str, Any]]:
    """A worker's heartbeat is also one of the attempt it works on, while that attempt is live and its own.

    So an agent that records no span for a while stays responsive as long as its runner heartbeats; a runner
    that dies stops both, and the watchdog marks the attempt `unresponsive` after `unresponsive_seconds`.
    Only `last_heartbeat_time` changes: a heartbeat never revives a stale attempt.
    """
    if attempt.worker_id != worker_id or attempt.status not in ("preparing", "running"):
        return None
    return {"last_heartbeat_time": now}


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
        if span.sequence_id >= 0:
            floors[span.rollout_id] = max(floors.get(span.rollout_id, 0), span.sequence_id)
    return floors
