"""Conformance: a dequeue limited to one run claims only that run's rollouts, on every backend.

Several `fit` runs can share one store (`agl store`); each run's runners pass `run=` so that they never take
another run's rollouts, and the other runs' rollouts keep their place in the queue.
"""

from __future__ import annotations

import asyncio

import pytest

from agentlightning.semconv import AGL_RUN
from agentlightning.store import LightningStore
from agentlightning.types import EnqueueRolloutRequest, RolloutConfig

from .backends import Backend


def _of(run: str, task: int) -> EnqueueRolloutRequest:
    return EnqueueRolloutRequest(input={"task": task}, metadata={AGL_RUN: run, "task": task})


async def test_a_run_claims_only_its_own_rollouts_in_fifo_order(store: LightningStore) -> None:
    queued = await store.enqueue_many_rollouts([_of("a.py", 1), _of("b.py", 2), _of("a.py", 3), _of("b.py", 4)])
    await store.enqueue_rollout(input="untagged")
    ids = {r.metadata["task"]: r.rollout_id for r in queued if r.metadata}

    first = await store.dequeue_rollout(worker_id="w-b", run="b.py")
    assert first is not None and first.rollout_id == ids[2]
    rest_of_b = await store.dequeue_many_rollouts(limit=5, worker_id="w-b", run="b.py")
    assert [r.rollout_id for r in rest_of_b] == [ids[4]]
    assert await store.dequeue_many_rollouts(limit=5, run="b.py") == []

    # Run a's rollouts kept their place; an unfiltered dequeue still takes everything, in order.
    of_a = await store.wait_for_dequeue(timeout=0, limit=1, run="a.py")
    assert [r.rollout_id for r in of_a] == [ids[1]]
    anyone = await store.dequeue_many_rollouts(limit=5)
    assert [r.input for r in anyone] == [{"task": 3}, "untagged"]


async def test_a_waiting_run_is_not_woken_into_another_runs_rollout(store: LightningStore) -> None:
    waiting = asyncio.ensure_future(store.wait_for_dequeue(timeout=30, run="b.py"))
    await asyncio.sleep(0.3)
    other = await store.enqueue_rollout(input=1, metadata={AGL_RUN: "a.py"})
    await asyncio.sleep(0.3)
    assert not waiting.done(), "run b's wait must not claim run a's rollout"
    mine = await store.enqueue_rollout(input=2, metadata={AGL_RUN: "b.py"})
    claimed = await asyncio.wait_for(waiting, 30)
    assert [r.rollout_id for r in claimed] == [mine.rollout_id]
    left = await store.query_rollouts(status_in=["queuing"])
    assert [r.rollout_id for r in left.items] == [other.rollout_id]


async def test_a_requeued_rollout_is_claimed_by_its_run_again(store: LightningStore) -> None:
    retry = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    rollout = await store.enqueue_rollout(input=1, config=retry, metadata={AGL_RUN: "a.py"})
    claimed = await store.dequeue_rollout(run="a.py")
    assert claimed is not None
    await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, status="failed")
    retried = await store.query_rollouts(rollout_id_in=[rollout.rollout_id])
    assert retried.items[0].status == "requeuing"
    assert await store.dequeue_rollout(run="b.py") is None
    again = await store.dequeue_rollout(run="a.py")
    assert again is not None and again.attempt.sequence_id == 2


@pytest.mark.parametrize("run", [5, ""])
async def test_a_bad_run_is_refused_naming_the_field(store: LightningStore, backend: Backend, run: object) -> None:
    with pytest.raises(backend.errors, match="run"):
        await store.dequeue_many_rollouts(limit=1, run=run)  # type: ignore[arg-type]
