"""The state machine's decisions, as pure functions every backend applies (`agentlightning.store.transitions`)."""

from __future__ import annotations

from typing import Any

import pytest

from agentlightning.semconv import AGL_STALE_ATTEMPT
from agentlightning.store import transitions
from agentlightning.types import ATTEMPT_STATUSES, AUTO_SEQUENCE_ID, ROLLOUT_STATUSES, Attempt, Rollout, RolloutConfig

from .factories import make_span

NOW = 1_700_000_100.0


def rollout(status: str, **fields: Any) -> Rollout:
    return Rollout(rollout_id="ro-1", input=1, start_time=NOW - 100, status=status, **fields)  # type: ignore[arg-type]


def attempt(status: str = "running", **fields: Any) -> Attempt:
    values: dict[str, Any] = {"rollout_id": "ro-1", "attempt_id": "at-1", "sequence_id": 1, "start_time": NOW - 50}
    values.update(fields)
    return Attempt(status=status, **values)  # type: ignore[arg-type]


def test_terminal_status_stamps_end_time_leaves_the_queue_and_wakes_waiters() -> None:
    t = transitions.rollout_transition(rollout("queuing"), "cancelled", NOW, {"metadata": {"k": 1}})
    assert t.changes == {"metadata": {"k": 1}, "status": "cancelled", "end_time": NOW}
    assert (t.enqueue, t.dequeue, t.finished) == (False, True, True)


def test_requeuing_a_running_rollout_enqueues_it() -> None:
    t = transitions.rollout_transition(rollout("running"), "requeuing", NOW)
    assert t.changes == {"status": "requeuing"}
    assert (t.enqueue, t.dequeue, t.finished) == (True, False, False)


@pytest.mark.parametrize("entity", ["rollout", "attempt"])
def test_the_table_lists_every_status_and_finished_ones_go_nowhere(entity: str) -> None:
    statuses = ROLLOUT_STATUSES if entity == "rollout" else ATTEMPT_STATUSES
    table = transitions.ALLOWED_TRANSITIONS[entity]
    assert set(table) == set(statuses)
    for current, targets in table.items():
        assert current not in targets and targets <= set(statuses)
    final = {s for s in statuses if not table[s]}
    expected = (
        {"succeeded", "failed", "cancelled"}
        if entity == "rollout"
        else {"succeeded", "failed", "timeout", "unresponsive"}
    )
    assert final == expected


@pytest.mark.parametrize("entity", ["rollout", "attempt"])
def test_check_transition_refuses_exactly_the_pairs_the_table_leaves_out(entity: str) -> None:
    statuses = ROLLOUT_STATUSES if entity == "rollout" else ATTEMPT_STATUSES
    for current in statuses:
        for target in statuses:
            allowed = target == current or target in transitions.ALLOWED_TRANSITIONS[entity][current]
            assert transitions.transition_allowed(entity, current, target) is allowed
            if allowed:
                transitions.check_transition(entity, "x-1", current, target)
                continue
            with pytest.raises(transitions.ForbiddenTransitionError, match=f"from {current!r} to {target!r}"):
                transitions.check_transition(entity, "x-1", current, target)


def test_a_finished_rollout_refuses_any_other_status_and_its_attempts_do_not_move_it() -> None:
    with pytest.raises(transitions.ForbiddenTransitionError, match="final"):
        transitions.rollout_transition(rollout("succeeded", end_time=NOW - 1), "queuing", NOW)
    for status in ("succeeded", "failed", "cancelled"):
        assert transitions.rollout_status_after_attempt(rollout(status), attempt("failed")) is None
    assert transitions.rollout_status_after_attempt(rollout("queuing"), attempt("running")) is None


def test_stale_attempts_are_those_given_up_on_or_superseded() -> None:
    assert transitions.stale_attempt_reason(attempt("running"), latest_sequence_id=1) is None
    assert transitions.stale_attempt_reason(attempt("succeeded"), latest_sequence_id=2) is None
    assert "newer attempt" in (transitions.stale_attempt_reason(attempt("running"), latest_sequence_id=2) or "")
    for status in ("unresponsive", "timeout"):
        assert status in (transitions.stale_attempt_reason(attempt(status), latest_sequence_id=1) or "")
    with pytest.raises(transitions.StaleAttemptError, match="at-1"):
        transitions.check_attempt_update(attempt("unresponsive"), 1, {"last_heartbeat_time": NOW})
    with pytest.raises(transitions.ForbiddenTransitionError):
        transitions.check_attempt_update(attempt("succeeded"), 1, {"status": "running"})
    transitions.check_attempt_update(attempt("succeeded"), 2, {"status": "succeeded", "metadata": {}})


def test_stale_spans_are_marked_copies() -> None:
    span = make_span("ro-1", "at-1", 1)
    marked = transitions.mark_stale_span(span)
    assert marked.attributes[AGL_STALE_ATTEMPT] is True and AGL_STALE_ATTEMPT not in span.attributes


def test_same_status_changes_only_the_given_fields_and_keeps_a_queued_rollout_queued() -> None:
    changes = {"mode": "train"}
    t = transitions.rollout_transition(rollout("queuing"), "queuing", NOW, changes)
    assert t.changes == {"mode": "train"} and t.changes is not changes
    assert (t.enqueue, t.dequeue, t.finished) == (True, False, False)


def test_finishing_an_attempt_stamps_its_end_time_without_touching_the_input() -> None:
    changes = {"status": "succeeded"}
    assert transitions.stamp_attempt_changes(changes, NOW) == {"status": "succeeded", "end_time": NOW}
    assert changes == {"status": "succeeded"}
    assert transitions.stamp_attempt_changes({"status": "timeout"}, NOW) == {"status": "timeout"}
    repeat = transitions.stamp_attempt_changes(changes, NOW, attempt("succeeded", end_time=NOW - 5))
    assert repeat == {"status": "succeeded"}


@pytest.mark.parametrize(
    ("rollout_status", "attempt_status", "sequence_id", "expected"),
    [
        ("running", "succeeded", 1, "succeeded"),
        ("running", "failed", 1, "failed"),
        ("running", "timeout", 1, "requeuing"),
        ("running", "timeout", 3, "failed"),
        ("cancelled", "succeeded", 1, None),
    ],
)
def test_rollout_status_after_its_latest_attempt(
    rollout_status: str, attempt_status: str, sequence_id: int, expected: Any
) -> None:
    config = RolloutConfig(max_attempts=3, retry_condition=["timeout"])
    decided = transitions.rollout_status_after_attempt(
        rollout(rollout_status, config=config), attempt(attempt_status, sequence_id=sequence_id)
    )
    assert decided == expected


def test_first_span_makes_a_preparing_attempt_and_rollout_run() -> None:
    assert transitions.span_heartbeat_changes(attempt("preparing"), NOW) == {
        "last_heartbeat_time": NOW,
        "status": "running",
    }
    assert transitions.span_heartbeat_changes(attempt("running"), NOW) == {"last_heartbeat_time": NOW}
    assert transitions.rollout_status_after_span(rollout("preparing")) == "running"
    assert transitions.rollout_status_after_span(rollout("requeuing")) is None
    assert transitions.rollout_status_after_span(rollout("succeeded")) is None


def test_worker_follows_its_attempt_unless_it_moved_on() -> None:
    done = attempt("succeeded", worker_id="w-1")
    assert transitions.worker_release_changes(done, NOW, None) == {
        "status": "idle",
        "last_idle_time": NOW,
        "current_rollout_id": None,
        "current_attempt_id": None,
    }
    assert transitions.worker_release_changes(attempt("unresponsive", worker_id="w-1"), NOW, "at-1") == {
        "status": "unknown"
    }
    assert transitions.worker_release_changes(done, NOW, "at-other") is None
    assert transitions.worker_stays_busy(attempt("running")) and not transitions.worker_stays_busy(done)


def test_handing_an_attempt_to_another_worker_claims_that_worker() -> None:
    current = attempt(worker_id="w-1")
    moved = transitions.worker_reassignment(current, {"worker_id": "w-2"})
    assert moved is not None and moved.worker_id == "w-2"
    assert transitions.worker_reassignment(current, {"worker_id": "w-1"}) is None
    assert transitions.worker_reassignment(current, {"worker_id": None}) is None
    assert transitions.worker_claim_changes(moved, NOW)["current_attempt_id"] == "at-1"


def test_a_dequeue_that_claims_nothing_leaves_the_worker_idle() -> None:
    assert transitions.worker_dequeue_changes(True, NOW) == {"last_dequeue_time": NOW}
    assert transitions.worker_dequeue_changes(False, NOW)["status"] == "idle"


def test_sequence_floors_ignore_spans_the_store_numbers() -> None:
    spans = [make_span("ro-1", "at-1", 4), make_span("ro-1", "at-1", 2), make_span("ro-2", "at-2", AUTO_SEQUENCE_ID)]
    assert transitions.sequence_floors(spans) == {"ro-1": 4}
    assert transitions.sequence_floors([make_span("ro-3", "at-3", 0)]) == {"ro-3": 0}  # 0 is a real id
