"""Conformance: workers as the store sees them through heartbeats, dequeues and attempt updates."""

from __future__ import annotations

from agentlightning.store import LightningStore

from .backends import FakeClock


async def test_update_worker_upserts_a_heartbeat(store: LightningStore, clock: FakeClock) -> None:
    assert await store.get_worker_by_id("w-1") is None
    worker = await store.update_worker("w-1", heartbeat_stats={"cpu": 0.5})
    assert worker.worker_id == "w-1"
    assert worker.status == "unknown"
    assert worker.heartbeat_stats == {"cpu": 0.5}
    assert worker.last_heartbeat_time == clock.now
    clock.advance(3)
    again = await store.update_worker("w-1")
    assert again.heartbeat_stats == {"cpu": 0.5}
    assert again.last_heartbeat_time == clock.now
    assert await store.get_worker_by_id("w-1") == again
    assert (await store.query_workers()).total == 1


async def test_dequeue_claims_for_the_worker(store: LightningStore, clock: FakeClock) -> None:
    await store.enqueue_rollout(input=1)
    clock.advance(1)
    claimed = await store.dequeue_rollout(worker_id="w-1")
    assert claimed is not None
    worker = await store.get_worker_by_id("w-1")
    assert worker is not None
    assert worker.status == "busy"
    assert worker.last_dequeue_time == clock.now
    assert worker.last_busy_time == clock.now
    assert worker.current_rollout_id == claimed.rollout_id
    assert worker.current_attempt_id == claimed.attempt.attempt_id


async def test_dequeue_on_an_empty_queue_marks_the_worker_idle(store: LightningStore, clock: FakeClock) -> None:
    assert await store.dequeue_rollout(worker_id="w-2") is None
    worker = await store.get_worker_by_id("w-2")
    assert worker is not None
    assert worker.status == "idle"
    assert worker.last_dequeue_time == clock.now
    assert worker.last_idle_time == clock.now


async def test_worker_status_follows_its_attempt(store: LightningStore, clock: FakeClock) -> None:
    await store.enqueue_rollout(input=1)
    claimed = await store.dequeue_rollout(worker_id="w-1")
    assert claimed is not None
    clock.advance(1)
    await store.update_attempt(claimed.rollout_id, "latest", status="running")
    assert (await store.get_worker_by_id("w-1")).status == "busy"  # type: ignore[union-attr]
    clock.advance(1)
    await store.update_attempt(claimed.rollout_id, "latest", status="succeeded")
    worker = await store.get_worker_by_id("w-1")
    assert worker is not None and worker.status == "idle" and worker.last_idle_time == clock.now
    await store.enqueue_rollout(input=2)
    silent = await store.dequeue_rollout(worker_id="w-1")
    assert silent is not None
    await store.update_attempt(silent.rollout_id, "latest", status="unresponsive")
    assert (await store.get_worker_by_id("w-1")).status == "unknown"  # type: ignore[union-attr]


async def test_attempt_updates_after_the_worker_moved_on_leave_it_busy(store: LightningStore) -> None:
    await store.enqueue_rollout(input=1)
    await store.enqueue_rollout(input=2)
    first = await store.dequeue_rollout(worker_id="w-1")
    second = await store.dequeue_rollout(worker_id="w-1")
    assert first is not None and second is not None
    await store.update_attempt(first.rollout_id, "latest", status="failed")
    worker = await store.get_worker_by_id("w-1")
    assert worker is not None
    assert worker.status == "busy"
    assert worker.current_attempt_id == second.attempt.attempt_id


async def test_start_rollout_and_start_attempt_claim_for_the_worker(store: LightningStore) -> None:
    started = await store.start_rollout(input=1, worker_id="w-3")
    worker = await store.get_worker_by_id("w-3")
    assert worker is not None and worker.status == "busy" and worker.current_rollout_id == started.rollout_id
    retry = await store.start_attempt(started.rollout_id, worker_id="w-4")
    worker = await store.get_worker_by_id("w-4")
    assert worker is not None and worker.current_attempt_id == retry.attempt.attempt_id


async def test_update_attempt_assigning_a_worker_claims_for_it(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    await store.update_attempt(started.rollout_id, "latest", worker_id="w-5")
    worker = await store.get_worker_by_id("w-5")
    assert worker is not None and worker.status == "busy"
    assert worker.current_attempt_id == started.attempt.attempt_id


async def test_query_workers(store: LightningStore, clock: FakeClock) -> None:
    await store.update_worker("runner-b")
    clock.advance(1)
    await store.dequeue_rollout(worker_id="runner-a")
    clock.advance(1)
    await store.enqueue_rollout(input=1)
    await store.dequeue_rollout(worker_id="other-c")
    everything = await store.query_workers()
    assert [w.worker_id for w in everything] == ["runner-b", "runner-a", "other-c"]
    idle = await store.query_workers(status_in=["idle"])
    assert [w.worker_id for w in idle] == ["runner-a"]
    runners = await store.query_workers(worker_id_contains="runner")
    assert [w.worker_id for w in runners] == ["runner-b", "runner-a"]
    busy_or_b = await store.query_workers(status_in=["busy"], worker_id_contains="-b", filter_logic="or")
    assert [w.worker_id for w in busy_or_b] == ["runner-b", "other-c"]
    both = await store.query_workers(status_in=["idle", "busy"], worker_id_contains="runner")
    assert [w.worker_id for w in both] == ["runner-a"]
    by_id = await store.query_workers(sort_by="worker_id", sort_order="desc", limit=2)
    assert [w.worker_id for w in by_id] == ["runner-b", "runner-a"] and by_id.total == 3
    by_dequeue = await store.query_workers(sort_by="last_dequeue_time")
    assert [w.worker_id for w in by_dequeue] == ["runner-b", "runner-a", "other-c"]
