"""`FinishedRollouts` reads the newest finished rollouts once, then only what finished since."""

from __future__ import annotations

from agentlightning.dashboard.finished import FinishedRollouts
from agentlightning.store import InMemoryLightningStore

from .seed import ManualClock


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def finish(store: InMemoryLightningStore, clock: ManualClock, n: int) -> list[str]:
    ids = []
    for i in range(n):
        rollout = await store.start_rollout(input=i)
        clock.advance(1.0)
        await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
        ids.append(rollout.rollout_id)
    return ids


async def newest_from_store(store: InMemoryLightningStore, limit: int) -> list[str]:
    page = await store.query_rollouts(
        status_in=["succeeded", "failed", "cancelled"], sort_by="end_time", sort_order="desc", limit=limit
    )
    return [r.rollout_id for r in page]


async def test_unchanged_store_is_not_read_again() -> None:
    clock = ManualClock(1000.0)
    store = InMemoryLightningStore(clock=clock)
    ids = await finish(store, clock, 5)
    cache = FinishedRollouts(clock=Ticks())
    first, total = await cache.newest(store, 3)
    assert [r.rollout_id for r in first] == ids[::-1][:3] and total == 5
    again, total = await cache.newest(store, 3)
    assert [r.rollout_id for r in again] == ids[::-1][:3] and total == 5
    smaller, _ = await cache.newest(store, 2)
    assert [r.rollout_id for r in smaller] == ids[::-1][:2]
    assert (cache.full_loads, cache.top_ups) == (1, 0)


async def test_newly_finished_rollouts_are_topped_up() -> None:
    clock = ManualClock(1000.0)
    store = InMemoryLightningStore(clock=clock)
    await finish(store, clock, 6)
    cache = FinishedRollouts(clock=Ticks(), slack=1)
    await cache.newest(store, 4)
    await store.enqueue_rollout(input="still queued")  # unfinished rollouts change nothing
    await finish(store, clock, 2)
    items, total = await cache.newest(store, 4)
    assert [r.rollout_id for r in items] == await newest_from_store(store, 4)
    assert total == 8
    assert (cache.full_loads, cache.top_ups) == (1, 1)


async def test_everything_is_reread_periodically_and_for_larger_limits() -> None:
    clock = ManualClock(1000.0)
    store = InMemoryLightningStore(clock=clock)
    await finish(store, clock, 4)
    ticks = Ticks()
    cache = FinishedRollouts(clock=ticks, full_reload_seconds=60.0)
    await cache.newest(store, 2)
    await cache.newest(store, 3)  # more than it holds
    assert cache.full_loads == 2
    ticks.now = 61.0
    items, _ = await cache.newest(store, 3)
    assert cache.full_loads == 3
    assert [r.rollout_id for r in items] == await newest_from_store(store, 3)


async def test_no_finished_rollouts() -> None:
    store = InMemoryLightningStore()
    await store.enqueue_rollout(input=1)
    cache = FinishedRollouts()
    assert await cache.newest(store, 10) == ([], 0)
    assert await cache.newest(store, 10) == ([], 0)
    assert cache.full_loads == 1
