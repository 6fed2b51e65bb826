"""An idle runner waits on the store (woken by an enqueue) instead of sleeping, and still stops at once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, Optional

import pytest

from agentlightning.litagent import LitAgent
from agentlightning.runner import LitAgentRunner
from agentlightning.store.base import LightningStore
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.store_http.client import LightningStoreClient
from agentlightning.store_http.server import LightningStoreServer
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import AttemptedRollout, NamedResources, Rollout

# Far longer than any test here runs: a runner that reacts sooner was woken, it did not poll.
LONG_POLL_INTERVAL = 120.0


class DequeueCountingStore(InMemoryLightningStore):
    """Counts the claims the store runs (each dequeue call, or each wake-up of a waiting one)."""

    def __init__(self) -> None:
        super().__init__(thread_safe=True)
        self.claims = 0

    async def _dequeue(self, limit: int, worker_id: Optional[str], run: Optional[str] = None) -> list[AttemptedRollout]:
        self.claims += 1
        return await super()._dequeue(limit, worker_id, run)


class Recording(LitAgent[str]):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.ran = asyncio.Event()

    async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        self.seen.append(task)
        self.ran.set()
        return 1.0


@pytest.fixture(params=["memory", "http"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[LightningStore, DequeueCountingStore]]:
    """(the store the runner talks to, the in-process store that holds the queue)."""
    backing = DequeueCountingStore()
    if request.param == "memory":
        yield backing, backing
        return
    server = LightningStoreServer(backing, port=0)
    await server.start()
    client = LightningStoreClient(server.endpoint)
    try:
        yield client, backing
    finally:
        await client.close()
        await server.stop()


def idle_runner(tracer_poll: float = LONG_POLL_INTERVAL) -> LitAgentRunner[Any]:
    return LitAgentRunner(OtelTracer(instrument_openai=False), poll_interval=tracer_poll, heartbeat_interval=0)


async def test_an_idle_runner_takes_a_new_rollout_when_it_is_enqueued(
    stores: tuple[LightningStore, DequeueCountingStore],
) -> None:
    store, backing = stores
    runner, agent, stop = idle_runner(), Recording(), threading.Event()
    with runner.run_context(agent=agent, store=store):
        task = asyncio.create_task(runner.iter(event=stop))
        await asyncio.sleep(0.5)  # the runner found the queue empty and is waiting
        assert not task.done()
        await backing.enqueue_rollout("woken")
        await asyncio.wait_for(agent.ran.wait(), timeout=30)  # a poll would only come after 120 s
        stop.set()
        await asyncio.wait_for(task, timeout=10)
    assert agent.seen == ["woken"]


async def test_an_idle_runner_does_not_poll_in_a_loop(stores: tuple[LightningStore, DequeueCountingStore]) -> None:
    store, backing = stores
    runner, stop = LitAgentRunner(OtelTracer(instrument_openai=False), heartbeat_interval=0), threading.Event()
    with runner.run_context(agent=Recording(), store=store):
        task = asyncio.create_task(runner.iter(event=stop))  # default settings
        await asyncio.sleep(1.5)
        stop.set()
        await asyncio.wait_for(task, timeout=10)
    # One claim that found the queue empty, then a wait: no re-asking within the 5 s poll interval.
    assert backing.claims == 1


async def test_a_stop_signal_ends_a_waiting_runner_and_leaves_the_queue_alone(
    stores: tuple[LightningStore, DequeueCountingStore],
) -> None:
    store, backing = stores
    runner, agent, stop = idle_runner(), Recording(), threading.Event()
    with runner.run_context(agent=agent, store=store):
        task = asyncio.create_task(runner.iter(event=stop))
        await asyncio.sleep(0.5)
        stopped_at = time.monotonic()
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        took = time.monotonic() - stopped_at
    assert took < 2.0, f"the runner took {took:.2f} s to stop; it checks the stop signal every 0.1 s"
    await asyncio.sleep(0.3)  # over HTTP the server gives up the wait once the runner hung up
    rollout = await backing.enqueue_rollout("after the stop")
    await asyncio.sleep(0.3)
    assert (await backing.get_rollout_by_id(rollout.rollout_id)).status == "queuing"  # type: ignore[union-attr]
    assert agent.seen == []
