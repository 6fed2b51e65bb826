"""Conformance: the watchdog marks stale attempts, driven by the fake clock (no sleeping)."""

from __future__ import annotations

from agentlightning.store import LightningStore
from agentlightning.types import AttemptedRollout, RolloutConfig
from agentlightning.types.core import DEFAULT_TIMEOUT_SECONDS, DEFAULT_UNRESPONSIVE_SECONDS

from .backends import FakeClock
from .factories import span_of


async def claim(store: LightningStore, config: RolloutConfig) -> AttemptedRollout:
    await store.enqueue_rollout(input=1, config=config)
    claimed = await store.dequeue_rollout(worker_id="w-1")
    assert claimed is not None
    return claimed


async def statuses(store: LightningStore, rollout_id: str) -> tuple[str, str]:
    """(rollout status, latest attempt status) — reading them also gives the watchdog its turn."""
    rollout = await store.get_rollout_by_id(rollout_id)
    attempt = await store.get_latest_attempt(rollout_id)
    assert rollout is not None and attempt is not None
    return rollout.status, attempt.status


async def test_timeout_counts_from_attempt_start(store: LightningStore, clock: FakeClock) -> None:
    claimed = await claim(store, RolloutConfig(timeout_seconds=10))
    await store.add_span(span_of(claimed, 1))
    clock.advance(10)
    assert await statuses(store, claimed.rollout_id) == ("running", "running")
    clock.advance(0.5)
    assert await statuses(store, claimed.rollout_id) == ("failed", "timeout")
    rollout = await store.get_rollout_by_id(claimed.rollout_id)
    assert rollout is not None and rollout.end_time == clock.now
    worker = await store.get_worker_by_id("w-1")
    assert worker is not None and worker.status == "unknown"


async def test_timeout_with_retry_requeues(store: LightningStore, clock: FakeClock) -> None:
    claimed = await claim(store, RolloutConfig(timeout_seconds=5, max_attempts=2, retry_condition=["timeout"]))
    clock.advance(6)
    retried = await store.dequeue_rollout()
    assert retried is not None and retried.rollout_id == claimed.rollout_id
    assert retried.attempt.sequence_id == 2
    attempts = await store.query_attempts(claimed.rollout_id)
    assert [a.status for a in attempts] == ["timeout", "preparing"]


async def test_unresponsive_counts_from_start_without_heartbeat(store: LightningStore, clock: FakeClock) -> None:
    claimed = await claim(store, RolloutConfig(unresponsive_seconds=10))
    clock.advance(9)
    assert await statuses(store, claimed.rollout_id) == ("preparing", "preparing")
    clock.advance(2)
    assert await statuses(store, claimed.rollout_id) == ("failed", "unresponsive")


async def test_unresponsive_counts_from_last_heartbeat(store: LightningStore, clock: FakeClock) -> None:
    claimed = await claim(
        store, RolloutConfig(unresponsive_seconds=10, max_attempts=2, retry_condition=["unresponsive"])
    )
    clock.advance(8)
    await store.add_span(span_of(claimed, 1))
    clock.advance(8)
    assert await statuses(store, claimed.rollout_id) == ("running", "running")
    clock.advance(3)
    assert await statuses(store, claimed.rollout_id) == ("requeuing", "unresponsive")
    # As in v0.3, a late span brings the attempt back while no retry claimed the rollout yet.
    await store.add_span(span_of(claimed, 2))
    assert await statuses(store, claimed.rollout_id) == ("running", "running")


async def test_explicit_heartbeat_counts(store: LightningStore, clock: FakeClock) -> None:
    claimed = await claim(store, RolloutConfig(unresponsive_seconds=10))
    clock.advance(8)
    await store.update_attempt(claimed.rollout_id, "latest", last_heartbeat_time=clock.now)
    clock.advance(8)
    assert await statuses(store, claimed.rollout_id) == ("preparing", "preparing")


async def test_a_worker_heartbeat_keeps_its_current_attempt_responsive(store: LightningStore, clock: FakeClock) -> None:
    """A runner's heartbeat counts for the attempt it works on: a silent agent is not a dead runner."""
    claimed = await claim(store, RolloutConfig(unresponsive_seconds=10))
    for _ in range(5):
        clock.advance(8)
        await store.update_worker("w-1", heartbeat_stats={"alive": True})
    assert await statuses(store, claimed.rollout_id) == ("preparing", "preparing")
    attempt = await store.get_latest_attempt(claimed.rollout_id)
    assert attempt is not None and attempt.last_heartbeat_time == clock.now
    clock.advance(11)  # the runner died: no heartbeat, no span
    assert await statuses(store, claimed.rollout_id) == ("failed", "unresponsive")


async def test_another_workers_heartbeat_does_not_count(store: LightningStore, clock: FakeClock) -> None:
    claimed = await claim(store, RolloutConfig(unresponsive_seconds=10))
    clock.advance(8)
    await store.update_worker("w-2", heartbeat_stats={"alive": True})
    clock.advance(3)
    assert await statuses(store, claimed.rollout_id) == ("failed", "unresponsive")
    # The dead attempt's worker coming back later does not revive it: stale attempts stay fenced.
    await store.update_worker("w-1", heartbeat_stats={"alive": True})
    attempt = await store.get_latest_attempt(claimed.rollout_id)
    assert attempt is not None and attempt.status == "unresponsive" and attempt.last_heartbeat_time is None


async def test_default_limits_end_an_attempt_whose_runner_died(store: LightningStore, clock: FakeClock) -> None:
    """With no config at all, a killed runner's rollout fails after DEFAULT_UNRESPONSIVE_SECONDS of silence."""
    silent = await claim(store, RolloutConfig())
    clock.advance(DEFAULT_UNRESPONSIVE_SECONDS - 1)
    assert await statuses(store, silent.rollout_id) == ("preparing", "preparing")
    clock.advance(2)
    assert await statuses(store, silent.rollout_id) == ("failed", "unresponsive")


async def test_default_timeout_ends_an_attempt_that_heartbeats_forever(store: LightningStore, clock: FakeClock) -> None:
    await store.enqueue_rollout(input=1)
    claimed = await store.dequeue_rollout(worker_id="w-1")
    assert claimed is not None
    step = DEFAULT_UNRESPONSIVE_SECONDS / 2
    for _ in range(int(DEFAULT_TIMEOUT_SECONDS // step)):
        clock.advance(step)
        await store.update_worker("w-1", heartbeat_stats={"alive": True})
    assert await statuses(store, claimed.rollout_id) == ("preparing", "preparing")
    clock.advance(step)
    assert await statuses(store, claimed.rollout_id) == ("failed", "timeout")


async def test_timeout_wins_over_unresponsive(store: LightningStore, clock: FakeClock) -> None:
    claimed = await claim(store, RolloutConfig(timeout_seconds=5, unresponsive_seconds=5))
    clock.advance(6)
    assert await statuses(store, claimed.rollout_id) == ("failed", "timeout")


async def test_finished_and_unconfigured_rollouts_are_left_alone(store: LightningStore, clock: FakeClock) -> None:
    done = await claim(store, RolloutConfig(timeout_seconds=1))
    await store.update_attempt(done.rollout_id, "latest", status="succeeded")
    relaxed = await claim(store, RolloutConfig(timeout_seconds=None, unresponsive_seconds=None))
    queued = await store.enqueue_rollout(input=2, config=RolloutConfig(timeout_seconds=1))
    clock.advance(1000)
    assert await statuses(store, done.rollout_id) == ("succeeded", "succeeded")
    assert await statuses(store, relaxed.rollout_id) == ("preparing", "preparing")
    still_queued = await store.get_rollout_by_id(queued.rollout_id)
    assert still_queued is not None and still_queued.status == "queuing"


async def test_only_the_latest_attempt_is_watched(store: LightningStore, clock: FakeClock) -> None:
    started = await store.start_rollout(input=1, config=RolloutConfig(timeout_seconds=10))
    clock.advance(8)
    retry = await store.start_attempt(started.rollout_id)
    clock.advance(5)
    attempts = await store.query_attempts(started.rollout_id)
    assert [a.status for a in attempts] == ["preparing", "preparing"]
    rollout = await store.get_rollout_by_id(started.rollout_id)
    assert rollout is not None and rollout.status == "preparing"
    assert retry.attempt.sequence_id == 2


async def test_wait_sees_rollouts_the_watchdog_finished(store: LightningStore, clock: FakeClock) -> None:
    claimed = await claim(store, RolloutConfig(timeout_seconds=1))
    clock.advance(2)
    done = await store.wait_for_rollouts(rollout_ids=[claimed.rollout_id], timeout=0)
    assert [(r.rollout_id, r.status) for r in done] == [(claimed.rollout_id, "failed")]
