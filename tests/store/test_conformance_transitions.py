"""Conformance: finished rollouts and attempts stay finished, and stale attempts are fenced, on every backend.

Every pair of statuses that `transitions.ALLOWED_TRANSITIONS` does not list is tried on every backend and
must be refused with a `StateConflictError` (HTTP 409 through the client) that leaves the entity unchanged.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentlightning.semconv import AGL_STALE_ATTEMPT
from agentlightning.store import LightningStore
from agentlightning.store.transitions import (
    ALLOWED_TRANSITIONS,
    DIRECT_ROLLOUT_TRANSITIONS,
    ForbiddenTransitionError,
    StaleAttemptError,
    StateConflictError,
)
from agentlightning.types import ATTEMPT_STATUSES, ROLLOUT_STATUSES, AttemptedRollout, Rollout, RolloutConfig

from .backends import FakeClock
from .factories import span_of

RETRY_UNRESPONSIVE = RolloutConfig(max_attempts=2, retry_condition=["unresponsive", "timeout"])


def forbidden(entity: str, current: str) -> list[str]:
    """The moves `update_rollout` / `update_attempt` refuse (the table, plus v0.3's direct rollout moves)."""
    statuses = ROLLOUT_STATUSES if entity == "rollout" else ATTEMPT_STATUSES
    direct = DIRECT_ROLLOUT_TRANSITIONS.get(current, frozenset()) if entity == "rollout" else frozenset()
    return [s for s in statuses if s != current and s not in ALLOWED_TRANSITIONS[entity][current] | direct]


async def rollout_in(store: LightningStore, status: str) -> Rollout:
    """A rollout brought to `status` by allowed moves only."""
    if status == "preparing":
        return await store.start_rollout(input=status)
    if status == "running":
        started = await store.start_rollout(input=status)
        await store.update_attempt(started.rollout_id, "latest", status="running")
        return started
    queued = await store.enqueue_rollout(input=status)
    if status != "queuing":
        await store.update_rollout(queued.rollout_id, status=status)
    return queued


async def attempt_in(store: LightningStore, status: str) -> AttemptedRollout:
    """A rollout whose only attempt was brought to `status` by allowed moves only."""
    started = await store.start_rollout(input=status)
    if status != "preparing":
        await store.update_attempt(started.rollout_id, "latest", status=status)
    return started


async def status_of(store: LightningStore, rollout_id: str) -> str:
    rollout = await store.get_rollout_by_id(rollout_id)
    assert rollout is not None
    return rollout.status


# ---- every forbidden pair ----


@pytest.mark.parametrize("current", [s for s in ROLLOUT_STATUSES if forbidden("rollout", s)])
async def test_forbidden_rollout_transitions_are_refused(store: LightningStore, current: str) -> None:
    for target in forbidden("rollout", current):
        rollout = await rollout_in(store, current)
        before = await store.get_rollout_by_id(rollout.rollout_id)
        with pytest.raises(ForbiddenTransitionError, match=f"from {current!r} to {target!r}"):
            await store.update_rollout(rollout.rollout_id, status=target)  # type: ignore[arg-type]
        assert await store.get_rollout_by_id(rollout.rollout_id) == before, (current, target)


@pytest.mark.parametrize("current", [s for s in ATTEMPT_STATUSES if forbidden("attempt", s)])
async def test_forbidden_attempt_transitions_are_refused(store: LightningStore, current: str) -> None:
    for target in forbidden("attempt", current):
        started = await attempt_in(store, current)
        before = (await store.get_latest_attempt(started.rollout_id), await store.get_rollout_by_id(started.rollout_id))
        # Attempts the watchdog gave up on are stale: refused as such before the table is consulted.
        with pytest.raises(StateConflictError, match=started.attempt.attempt_id):
            await store.update_attempt(started.rollout_id, started.attempt.attempt_id, status=target)  # type: ignore[arg-type]
        after = (await store.get_latest_attempt(started.rollout_id), await store.get_rollout_by_id(started.rollout_id))
        assert after == before, (current, target)


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled"])
async def test_a_finished_rollout_gets_no_new_attempt(store: LightningStore, status: str) -> None:
    rollout = await rollout_in(store, status)
    with pytest.raises(ForbiddenTransitionError, match="final"):
        await store.start_attempt(rollout.rollout_id)
    assert (await store.query_attempts(rollout.rollout_id)).total == 0
    assert await status_of(store, rollout.rollout_id) == status


# ---- the defects of issue 13, item 3 ----


async def test_a_succeeded_attempt_cannot_fail_or_run_again(store: LightningStore) -> None:
    started = await attempt_in(store, "succeeded")
    for status in ("failed", "running"):
        with pytest.raises(StateConflictError):
            await store.update_attempt(started.rollout_id, "latest", status=status)  # type: ignore[arg-type]
    attempt = await store.get_latest_attempt(started.rollout_id)
    assert attempt is not None and attempt.status == "succeeded"
    assert await status_of(store, started.rollout_id) == "succeeded"


async def test_a_succeeded_rollout_cannot_be_requeued(store: LightningStore) -> None:
    started = await attempt_in(store, "succeeded")
    for status in ("queuing", "requeuing"):
        with pytest.raises(StateConflictError, match="final"):
            await store.update_rollout(started.rollout_id, status=status)  # type: ignore[arg-type]
    assert await store.dequeue_rollout() is None
    assert await status_of(store, started.rollout_id) == "succeeded"


async def test_finishing_twice_with_the_same_status_is_a_harmless_repeat(
    store: LightningStore, clock: FakeClock
) -> None:
    started = await attempt_in(store, "succeeded")
    first = await store.get_latest_attempt(started.rollout_id)
    clock.advance(3)
    again = await store.update_attempt(started.rollout_id, "latest", status="succeeded", metadata={"retry": 1})
    assert first is not None and again.end_time == first.end_time and again.metadata == {"retry": 1}
    done = await store.update_rollout(started.rollout_id, status="succeeded", metadata={"note": "kept"})
    assert done.status == "succeeded" and done.metadata == {"note": "kept"}


async def test_late_updates_of_a_requeued_attempt_are_refused(store: LightningStore, clock: FakeClock) -> None:
    config = RolloutConfig(unresponsive_seconds=5, max_attempts=2, retry_condition=["unresponsive"])
    await store.enqueue_rollout(input=1, config=config)
    first = await store.dequeue_rollout(worker_id="w-1")
    assert first is not None
    clock.advance(10)  # silent too long: the watchdog marks it unresponsive and requeues the rollout
    second = await store.dequeue_rollout(worker_id="w-2")
    assert second is not None and second.rollout_id == first.rollout_id and second.attempt.sequence_id == 2
    attempt_id = first.attempt.attempt_id
    with pytest.raises(StaleAttemptError, match=attempt_id):
        await store.update_attempt(first.rollout_id, attempt_id, status="succeeded")
    with pytest.raises(StaleAttemptError, match=attempt_id):
        await store.update_attempt(first.rollout_id, attempt_id, last_heartbeat_time=clock.now)
    await store.update_attempt(second.rollout_id, second.attempt.attempt_id, status="failed")
    attempts = await store.query_attempts(first.rollout_id)
    assert [a.status for a in attempts] == ["unresponsive", "failed"]
    assert await status_of(store, first.rollout_id) == "failed"


async def test_a_late_span_revives_an_unresponsive_attempt_not_yet_retried(store: LightningStore) -> None:
    """v0.3: a span brings an `unresponsive` attempt back to `running` (and its requeued rollout with it)."""
    await store.enqueue_rollout(input=1, config=RETRY_UNRESPONSIVE)
    first = await store.dequeue_rollout()
    assert first is not None
    await store.update_attempt(first.rollout_id, "latest", status="unresponsive")
    assert await status_of(store, first.rollout_id) == "requeuing"
    late = await store.add_span(span_of(first, 1))
    assert late is not None and AGL_STALE_ATTEMPT not in late.attributes
    attempt = await store.get_latest_attempt(first.rollout_id)
    assert attempt is not None and attempt.status == "running"
    assert await status_of(store, first.rollout_id) == "running"
    assert await store.dequeue_rollout() is None  # it left the queue: no second attempt runs it meanwhile
    await store.update_attempt(first.rollout_id, first.attempt.attempt_id, status="succeeded")
    attempts = await store.query_attempts(first.rollout_id)
    assert [a.status for a in attempts] == ["succeeded"]
    assert await status_of(store, first.rollout_id) == "succeeded"


async def test_late_spans_of_a_retried_attempt_are_kept_marked_and_move_nothing(store: LightningStore) -> None:
    """Kept from before v0.3's rule: once a retry claimed the rollout, the old attempt stays stale."""
    await store.enqueue_rollout(input=1, config=RETRY_UNRESPONSIVE)
    first = await store.dequeue_rollout()
    assert first is not None
    await store.update_attempt(first.rollout_id, "latest", status="unresponsive")
    second = await store.dequeue_rollout()
    assert second is not None and second.attempt.sequence_id == 2
    late = await store.add_span(span_of(first, 1))
    assert late is not None and late.attributes.get(AGL_STALE_ATTEMPT) is True
    await store.add_many_spans([span_of(first, 2), span_of(second, 3)])
    with pytest.raises(StaleAttemptError):
        await store.update_attempt(first.rollout_id, first.attempt.attempt_id, status="succeeded")
    await store.update_attempt(second.rollout_id, "latest", status="succeeded")
    spans = await store.query_spans(first.rollout_id)
    marks = [(s.attempt_id == first.attempt.attempt_id, s.attributes.get(AGL_STALE_ATTEMPT)) for s in spans]
    assert marks == [(True, True), (True, True), (False, None)]
    attempts = await store.query_attempts(first.rollout_id)
    assert [a.status for a in attempts] == ["unresponsive", "succeeded"]
    assert await status_of(store, first.rollout_id) == "succeeded"


async def test_a_late_span_does_not_revive_the_attempt_of_a_failed_rollout(store: LightningStore) -> None:
    """Kept ours: v0.3 revived it and let it turn the finished `failed` rollout into `succeeded`."""
    started = await store.start_rollout(input=1)  # no retry: unresponsive fails the rollout
    await store.update_attempt(started.rollout_id, "latest", status="unresponsive")
    assert await status_of(store, started.rollout_id) == "failed"
    late = await store.add_span(span_of(started, 1))
    assert late is not None and late.attributes.get(AGL_STALE_ATTEMPT) is True
    with pytest.raises(StaleAttemptError):
        await store.update_attempt(started.rollout_id, started.attempt.attempt_id, status="succeeded")
    attempt = await store.get_latest_attempt(started.rollout_id)
    assert attempt is not None and attempt.status == "unresponsive"
    assert await status_of(store, started.rollout_id) == "failed"


async def test_an_attempt_superseded_by_a_newer_one_is_fenced(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    second = await store.start_attempt(started.rollout_id)
    with pytest.raises(StaleAttemptError, match="newer attempt"):
        await store.update_attempt(started.rollout_id, started.attempt.attempt_id, status="succeeded")
    late = await store.add_span(span_of(started, 1))
    assert late is not None and late.attributes.get(AGL_STALE_ATTEMPT) is True
    assert [a.status for a in await store.query_attempts(started.rollout_id)] == ["preparing", "preparing"]
    await store.update_attempt(started.rollout_id, second.attempt.attempt_id, status="running")
    assert await status_of(store, started.rollout_id) == "running"


async def test_a_timed_out_attempt_cannot_succeed_after_its_rollout_failed(store: LightningStore) -> None:
    started = await attempt_in(store, "timeout")
    assert await status_of(store, started.rollout_id) == "failed"
    with pytest.raises(StateConflictError):
        await store.update_attempt(started.rollout_id, "latest", status="succeeded")
    assert await status_of(store, started.rollout_id) == "failed"


async def test_late_spans_of_a_finished_attempt_are_not_marked_stale(store: LightningStore) -> None:
    started = await attempt_in(store, "succeeded")
    late = await store.add_span(span_of(started, 1))
    assert late is not None and AGL_STALE_ATTEMPT not in late.attributes
    assert await status_of(store, started.rollout_id) == "succeeded"


async def test_update_rollout_may_run_a_queued_rollout_directly(store: LightningStore) -> None:
    """v0.3 allows `update_rollout(status="running")` on a queued or requeued rollout; it leaves the queue."""
    for status in ("queuing", "requeuing"):
        rollout: Any = await rollout_in(store, status)
        updated = await store.update_rollout(rollout.rollout_id, status="running")
        assert updated.status == "running" and await status_of(store, rollout.rollout_id) == "running"
    assert await store.dequeue_rollout() is None


async def test_an_old_attempt_does_not_pull_a_rollout_requeued_by_hand_back_to_running(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    await store.update_rollout(started.rollout_id, status="requeuing")
    await store.update_attempt(started.rollout_id, "latest", status="running")
    assert await status_of(store, started.rollout_id) == "requeuing"
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == started.rollout_id
