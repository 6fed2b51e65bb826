"""LightningStoreThreaded specifics (its full contract runs in the conformance suite as "threaded")."""

from __future__ import annotations

import asyncio

from agentlightning.store import InMemoryLightningStore, LightningStoreThreaded

from .backends import FakeClock


def make_store(clock: FakeClock) -> LightningStoreThreaded:
    return LightningStoreThreaded(InMemoryLightningStore(clock=clock, scan_debounce_seconds=0))


def test_capabilities() -> None:
    caps = dict(LightningStoreThreaded(InMemoryLightningStore()).capabilities)
    assert caps["thread_safe"] is True and caps["async_safe"] is True
    assert caps["zero_copy"] is False and caps["otlp_traces"] is False


async def test_waiting_does_not_hold_the_lock(clock: FakeClock) -> None:
    store = make_store(clock)
    rollout = await store.enqueue_rollout(input=1)
    waiting = asyncio.create_task(store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=60))
    await asyncio.sleep(0)
    assert not waiting.done()

    async def finish() -> None:
        await store.update_rollout(rollout.rollout_id, status="succeeded")

    # Another thread (with its own loop) gets through while this one waits, and wakes the waiter.
    await asyncio.wait_for(asyncio.to_thread(asyncio.run, finish()), timeout=10)
    done = await asyncio.wait_for(waiting, timeout=10)
    assert [r.status for r in done] == ["succeeded"]


async def test_a_cancelled_caller_does_not_leak_the_lock(clock: FakeClock) -> None:
    store = make_store(clock)
    store._lock.acquire()  # someone else holds the lock
    blocked = asyncio.create_task(store.enqueue_rollout(input=1))
    await asyncio.sleep(0)
    blocked.cancel()
    store._lock.release()
    try:
        await blocked
    except asyncio.CancelledError:
        pass
    # The executor thread that was waiting for the lock hands it back; the store stays usable.
    rollout = await asyncio.wait_for(store.enqueue_rollout(input=2), timeout=10)
    assert rollout.status == "queuing"


async def test_a_caller_on_the_same_loop_waits_without_blocking_the_loop(clock: FakeClock) -> None:
    store = make_store(clock)
    store._lock.acquire()
    pending = asyncio.create_task(store.enqueue_rollout(input=1))
    await asyncio.sleep(0)
    assert not pending.done()  # the loop is still running: we got here
    store._lock.release()
    rollout = await asyncio.wait_for(pending, timeout=10)
    assert rollout.input == 1
