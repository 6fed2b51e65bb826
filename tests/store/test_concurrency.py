"""Concurrency: many dequeuers (tasks or threads) each get distinct rollouts; none is lost or doubled."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

import pytest

from agentlightning.store import LightningStore
from agentlightning.types import EnqueueRolloutRequest, RolloutConfig

from .backends import TRAIT_THREADS, Backend, FakeClock
from .factories import span_of

N_ROLLOUTS = 300
N_TASKS = 200


async def dequeue_until_empty(store: LightningStore, worker_id: str) -> list[str]:
    claimed: list[str] = []
    while (rollout := await store.dequeue_rollout(worker_id=worker_id)) is not None:
        claimed.append(rollout.rollout_id)
        await asyncio.sleep(0)  # give the other dequeuers a turn between claims
    return claimed


async def test_concurrent_task_dequeuers_claim_each_rollout_once(store: LightningStore) -> None:
    created = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(N_ROLLOUTS)])
    results = await asyncio.gather(*(dequeue_until_empty(store, f"w-{i}") for i in range(N_TASKS)))
    counts = Counter(rid for claimed in results for rid in claimed)
    assert set(counts) == {r.rollout_id for r in created}
    assert max(counts.values()) == 1
    attempts = await store.query_rollouts(status_in=["preparing"])
    assert attempts.total == N_ROLLOUTS


async def test_producers_and_consumers_interleaved(store: LightningStore) -> None:
    produced: list[str] = []
    done_producing = asyncio.Event()

    async def produce(offset: int) -> None:
        for i in range(25):
            rollout = await store.enqueue_rollout(input=offset + i)
            produced.append(rollout.rollout_id)
            await asyncio.sleep(0)

    async def consume(worker_id: str) -> list[str]:
        claimed: list[str] = []
        while True:
            rollout = await store.dequeue_rollout(worker_id=worker_id)
            if rollout is not None:
                claimed.append(rollout.rollout_id)
                await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
            elif done_producing.is_set():
                return claimed
            await asyncio.sleep(0)

    consumers = [asyncio.create_task(consume(f"c-{i}")) for i in range(20)]
    await asyncio.gather(*(produce(k * 1000) for k in range(8)))
    done_producing.set()
    results = await asyncio.gather(*consumers)
    claimed = [rid for batch in results for rid in batch]
    assert sorted(claimed) == sorted(produced)
    assert len(claimed) == len(set(claimed)) == 200
    finished = await store.wait_for_rollouts(rollout_ids=produced, timeout=0)
    assert len(finished) == 200 and all(r.status == "succeeded" for r in finished)


async def test_concurrent_retries_requeue_each_rollout_once(store: LightningStore) -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    created = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i, config=config) for i in range(60)])

    async def fail_everything(worker_id: str) -> list[tuple[str, int]]:
        seen: list[tuple[str, int]] = []
        while (rollout := await store.dequeue_rollout(worker_id=worker_id)) is not None:
            seen.append((rollout.rollout_id, rollout.attempt.sequence_id))
            await asyncio.sleep(0)
            await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="failed")
        return seen

    results = await asyncio.gather(*(fail_everything(f"w-{i}") for i in range(30)))
    seen = Counter(pair for batch in results for pair in batch)
    expected = {(r.rollout_id, seq) for r in created for seq in (1, 2)}
    # A rollout requeued after the last worker stopped looking is still waiting; claim the rest now.
    for pair in await _claim_leftovers(store):
        seen[pair] += 1
    assert set(seen) == expected
    assert max(seen.values()) == 1


async def _claim_leftovers(store: LightningStore) -> list[tuple[str, int]]:
    leftovers: list[tuple[str, int]] = []
    while (rollout := await store.dequeue_rollout()) is not None:
        leftovers.append((rollout.rollout_id, rollout.attempt.sequence_id))
    return leftovers


async def test_concurrent_sequence_ids_are_unique(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)

    async def take(n: int) -> list[int]:
        ids: list[int] = []
        for _ in range(n):
            ids.append(await store.get_next_span_sequence_id(started.rollout_id, started.attempt.attempt_id))
            await asyncio.sleep(0)
        return ids

    results = await asyncio.gather(*(take(5) for _ in range(40)))
    flat = sorted(i for batch in results for i in batch)
    assert flat == list(range(1, 201))


async def test_concurrent_span_writers(store: LightningStore) -> None:
    rollouts = [await store.start_rollout(input=i) for i in range(10)]

    async def write(index: int) -> None:
        rollout = rollouts[index % len(rollouts)]
        for k in range(10):
            await store.add_span(span_of(rollout, index * 100 + k))
            await asyncio.sleep(0)

    await asyncio.gather(*(write(i) for i in range(50)))
    total = 0
    for rollout in rollouts:
        spans = await store.query_spans(rollout.rollout_id)
        total += spans.total
        assert len({s.span_id for s in spans}) == spans.total
    assert total == 500


def _run_thread_dequeuer(store: LightningStore, worker_id: str, out: list[str], errors: list[BaseException]) -> None:
    try:
        out.extend(asyncio.run(dequeue_until_empty(store, worker_id)))
    except BaseException as exc:  # surfaced by the test below
        errors.append(exc)


@pytest.mark.backend_traits(TRAIT_THREADS)
async def test_thread_dequeuers_claim_each_rollout_once(store: LightningStore) -> None:
    created = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(N_ROLLOUTS)])
    outputs: list[list[str]] = [[] for _ in range(8)]
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_run_thread_dequeuer, args=(store, f"t-{i}", outputs[i], errors)) for i in range(8)
    ]
    await asyncio.to_thread(lambda: ([t.start() for t in threads], [t.join() for t in threads]))
    assert errors == []
    counts = Counter(rid for out in outputs for rid in out)
    assert set(counts) == {r.rollout_id for r in created}
    assert max(counts.values()) == 1


@pytest.mark.backend_traits(TRAIT_THREADS)
async def test_thread_waits_while_other_threads_finish_rollouts(store: LightningStore) -> None:
    created = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(20)])
    ids = [r.rollout_id for r in created]
    waited: list[list[str]] = []

    def waiter() -> None:
        rollouts = asyncio.run(store.wait_for_rollouts(rollout_ids=ids, timeout=60))
        waited.append([r.rollout_id for r in rollouts])

    async def finish_all() -> None:
        while (rollout := await store.dequeue_rollout()) is not None:
            await store.update_attempt(rollout.rollout_id, "latest", status="succeeded")

    waiting_thread = threading.Thread(target=waiter)
    waiting_thread.start()
    workers = [threading.Thread(target=lambda: asyncio.run(finish_all())) for _ in range(4)]
    for worker in workers:
        worker.start()
    await asyncio.to_thread(lambda: [t.join() for t in [*workers, waiting_thread]])
    assert waited == [ids]


async def test_separate_stores_do_not_share_state(backend: Backend, tmp_path: Path, clock: FakeClock) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with backend.factory(tmp_path / "a", clock) as first, backend.factory(tmp_path / "b", clock) as second:
        await first.enqueue_rollout(input=1)
        assert await second.dequeue_rollout() is None
        assert (await second.query_rollouts()).total == 0
