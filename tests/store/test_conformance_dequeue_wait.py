"""Conformance: `wait_for_dequeue`, the long-poll a runner waits on instead of sleeping, on every backend."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from agentlightning.store import InMemoryLightningStore, LightningStore, LightningStoreThreaded
from agentlightning.store._backend import BackendLightningStore
from agentlightning.types import AttemptedRollout, RolloutConfig

from .backends import TRAIT_THREADS, Backend

# Far longer than any test runs: a wait that ends early was woken, not re-polled.
NO_POLL_SECONDS = 120.0
LONG_WAIT = 60.0
# What "at once" means on a loaded 2-core machine; any re-poll would take NO_POLL_SECONDS.
WOKEN_WITHIN = 10.0


@pytest.fixture(autouse=True)
def no_periodic_polls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Stores (also the one behind the HTTP server) re-ask only when woken during these tests."""
    monkeypatch.setattr(BackendLightningStore, "queue_poll_seconds", NO_POLL_SECONDS)
    monkeypatch.setattr(LightningStoreThreaded, "queue_poll_seconds", NO_POLL_SECONDS)
    yield


async def started(store: LightningStore, **kwargs: object) -> asyncio.Task[list]:  # type: ignore[type-arg]
    """A `wait_for_dequeue` task that has had time to reach its wait."""
    task = asyncio.ensure_future(store.wait_for_dequeue(timeout=LONG_WAIT, **kwargs))  # type: ignore[arg-type]
    await asyncio.sleep(0.3)
    assert not task.done(), "the queue is empty, so the call must still be waiting"
    return task


async def test_claims_at_once_when_something_is_queued(store: LightningStore) -> None:
    queued = await store.enqueue_rollout(input="ready")
    began = time.monotonic()
    claimed = await store.wait_for_dequeue(timeout=LONG_WAIT, worker_id="w1")
    assert time.monotonic() - began < WOKEN_WITHIN
    assert [r.rollout_id for r in claimed] == [queued.rollout_id]
    assert claimed[0].attempt.worker_id == "w1"
    assert claimed[0].status == "preparing"


async def test_enqueue_wakes_a_waiting_dequeue(store: LightningStore) -> None:
    waiting = await started(store, worker_id="w1")
    queued = await store.enqueue_rollout(input="late")
    began = time.monotonic()
    claimed = await asyncio.wait_for(waiting, WOKEN_WITHIN)
    assert time.monotonic() - began < WOKEN_WITHIN
    assert [r.rollout_id for r in claimed] == [queued.rollout_id]
    assert claimed[0].attempt.sequence_id == 1
    assert await store.dequeue_rollout() is None  # claimed exactly once


async def test_enqueue_many_wakes_a_waiting_dequeue_with_a_limit(store: LightningStore) -> None:
    from agentlightning.types import EnqueueRolloutRequest

    waiting = await started(store, limit=5)
    queued = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(3)])
    claimed = await asyncio.wait_for(waiting, WOKEN_WITHIN)
    assert [r.rollout_id for r in claimed] == [r.rollout_id for r in queued]


async def test_a_requeued_rollout_wakes_a_waiting_dequeue(store: LightningStore) -> None:
    rollout = await store.enqueue_rollout(
        input="flaky", config=RolloutConfig(max_attempts=2, retry_condition=["failed"])
    )
    first = await store.dequeue_rollout(worker_id="w1")
    assert first is not None
    waiting = await started(store, worker_id="w2")
    await store.update_attempt(rollout.rollout_id, first.attempt.attempt_id, status="failed")
    claimed = await asyncio.wait_for(waiting, WOKEN_WITHIN)
    assert [(r.rollout_id, r.attempt.sequence_id) for r in claimed] == [(rollout.rollout_id, 2)]


async def test_each_of_several_waiters_claims_a_different_rollout(store: LightningStore) -> None:
    waiting = [asyncio.ensure_future(store.wait_for_dequeue(timeout=LONG_WAIT)) for _ in range(3)]
    await asyncio.sleep(0.3)
    queued = [await store.enqueue_rollout(input=i) for i in range(3)]
    claimed = await asyncio.wait_for(asyncio.gather(*waiting), WOKEN_WITHIN)
    assert all(len(batch) == 1 for batch in claimed)
    assert sorted(batch[0].rollout_id for batch in claimed) == sorted(r.rollout_id for r in queued)


async def test_an_empty_queue_answers_empty_after_the_timeout(store: LightningStore) -> None:
    began = time.monotonic()
    assert await store.wait_for_dequeue(timeout=0.3) == []
    assert time.monotonic() - began >= 0.29
    assert await store.wait_for_dequeue(timeout=0) == []
    assert await store.wait_for_dequeue(timeout=LONG_WAIT, limit=0) == []


async def test_a_cancelled_wait_claims_nothing(store: LightningStore) -> None:
    """A runner told to stop cancels its wait: what is queued afterwards stays queued for the others."""
    waiting = await started(store, worker_id="w1")
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0.3)  # over HTTP the server notices the hang-up and gives its wait up
    queued = await store.enqueue_rollout(input="after the stop")
    await asyncio.sleep(0.3)
    claimed = await store.dequeue_rollout(worker_id="w2")
    assert claimed is not None and claimed.rollout_id == queued.rollout_id
    assert claimed.attempt.worker_id == "w2"


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), "1", True, None])
async def test_bad_timeouts_are_refused(store: LightningStore, backend: Backend, timeout: object) -> None:
    with pytest.raises(backend.errors, match="timeout"):
        await store.wait_for_dequeue(timeout=timeout)  # type: ignore[arg-type]


@pytest.mark.backend_traits(TRAIT_THREADS)
async def test_an_enqueue_from_another_thread_wakes_the_wait(store: LightningStore) -> None:
    waiting = await started(store)
    queued: list[str] = []

    def enqueue_elsewhere() -> None:
        async def enqueue() -> None:
            queued.append((await store.enqueue_rollout(input="from a thread")).rollout_id)
            await store.close_loop_resources()

        asyncio.run(enqueue())

    thread = threading.Thread(target=enqueue_elsewhere)
    thread.start()
    await asyncio.to_thread(thread.join, WOKEN_WITHIN)
    claimed = await asyncio.wait_for(waiting, WOKEN_WITHIN)
    assert [r.rollout_id for r in claimed] == queued


class OnlyDequeue(LightningStore):
    """A third-party store written against v0.3: it knows `dequeue_many_rollouts`, not `wait_for_dequeue`."""

    queue_poll_seconds = 0.1

    def __init__(self, ready_after: int) -> None:
        self.calls = 0
        self.ready_after = ready_after

    async def dequeue_many_rollouts(self, *, limit: int = 1, worker_id: str | None = None) -> list:  # type: ignore[override]
        self.calls += 1
        return ["claimed"] if self.calls >= self.ready_after else []


async def test_a_store_without_a_wake_up_is_re_asked_every_queue_poll_seconds() -> None:
    store = OnlyDequeue(ready_after=3)
    assert await store.wait_for_dequeue(timeout=LONG_WAIT) == ["claimed"]
    assert store.calls == 3
    idle = OnlyDequeue(ready_after=1_000)
    assert await idle.wait_for_dequeue(timeout=0.35) == []
    assert 3 <= idle.calls <= 5  # at 0, 0.1, 0.2, 0.3 s (and the deadline): a poll, not a spin
    assert await idle.wait_for_dequeue(timeout=LONG_WAIT, limit=0) == []
    with pytest.raises(ValueError, match="timeout"):
        await idle.wait_for_dequeue(timeout=-1)


class SlowClaims(InMemoryLightningStore):
    """Each claim takes 0.3 s, as a SQL claim running on a thread may: time for a cancellation to land in it."""

    async def _dequeue(self, limit: int, worker_id: str | None, run: str | None = None) -> list[AttemptedRollout]:
        await asyncio.sleep(0.3)
        return await super()._dequeue(limit, worker_id, run)


async def test_a_wait_cancelled_during_a_claim_still_hands_over_what_it_claimed() -> None:
    store = SlowClaims()
    queued = await store.enqueue_rollout(input="claimed as the runner stops")
    waiting = asyncio.ensure_future(store.wait_for_dequeue(timeout=LONG_WAIT))
    await asyncio.sleep(0.1)
    waiting.cancel()
    claimed = await waiting  # not CancelledError: the rollout is now this caller's, it must not vanish
    assert [r.rollout_id for r in claimed] == [queued.rollout_id]

    empty = asyncio.ensure_future(store.wait_for_dequeue(timeout=LONG_WAIT))
    await asyncio.sleep(0.1)
    empty.cancel()
    with pytest.raises(asyncio.CancelledError):  # nothing was claimed: the cancellation goes through
        await empty
