"""SharedMemoryExecutionStrategy with plain bundles: placement, stop propagation, failures."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from agentlightning.execution import ExecutionEvent, SharedMemoryExecutionStrategy
from agentlightning.store.base import LightningStore
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.store.threading import LightningStoreThreaded


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, Any]] = []
        self.stores: list[LightningStore] = []
        self.threads: dict[str, str] = {}

    def add(self, kind: str, value: Any = None) -> None:
        with self.lock:
            self.events.append((kind, value))


async def _wait_for_stop(event: ExecutionEvent) -> None:
    while not event.is_set():
        await asyncio.sleep(0.01)


def test_algorithm_on_main_stops_runners_when_done() -> None:
    rec = Recorder()

    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        rec.threads["algorithm"] = threading.current_thread().name
        rec.stores.append(store)
        await store.enqueue_rollout(input="task")

    async def runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        rec.stores.append(store)
        await _wait_for_stop(event)
        rec.add("runner-stopped", worker_id)

    strategy = SharedMemoryExecutionStrategy(n_runners=3, main_thread="algorithm", graceful_delay=5.0)
    store = InMemoryLightningStore()
    strategy.execute(algorithm, runner, store)
    assert rec.threads["algorithm"] == threading.main_thread().name
    assert sorted(v for k, v in rec.events if k == "runner-stopped") == [0, 1, 2]
    assert all(isinstance(s, LightningStoreThreaded) for s in rec.stores)
    assert len({id(s) for s in rec.stores}) == 1


def test_runner_on_main_lets_the_algorithm_finish() -> None:
    rec = Recorder()
    algorithm_may_finish = threading.Event()

    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        while not algorithm_may_finish.is_set():
            await asyncio.sleep(0.01)
        rec.add("algorithm-done", event.is_set())

    async def runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        rec.threads["runner"] = threading.current_thread().name
        rec.add("runner-done", worker_id)
        algorithm_may_finish.set()

    SharedMemoryExecutionStrategy(managed_store=False).execute(algorithm, runner, InMemoryLightningStore())
    assert rec.threads["runner"] == threading.main_thread().name
    # The algorithm completed on its own, without a stop request.
    assert rec.events == [("runner-done", 0), ("algorithm-done", False)]


def test_unmanaged_store_is_passed_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_MANAGED_STORE", "0")
    seen: list[LightningStore] = []

    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        seen.append(store)

    async def runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        seen.append(store)
        await _wait_for_stop(event)

    store = InMemoryLightningStore()
    strategy = SharedMemoryExecutionStrategy(main_thread="algorithm")
    assert strategy.managed_store is False
    strategy.execute(algorithm, runner, store)
    assert seen == [store, store]


def test_runner_failure_stops_the_algorithm_and_is_raised() -> None:
    rec = Recorder()

    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        await _wait_for_stop(event)
        rec.add("algorithm-saw-stop")

    async def runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        raise RuntimeError(f"runner {worker_id} exploded")

    strategy = SharedMemoryExecutionStrategy(n_runners=2, main_thread="algorithm")
    with pytest.raises(RuntimeError, match="exploded"):
        strategy.execute(algorithm, runner, InMemoryLightningStore())
    assert ("algorithm-saw-stop", None) in rec.events


def test_algorithm_failure_stops_runners() -> None:
    stopped = threading.Event()

    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        raise ValueError("bad algorithm")

    async def runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        await _wait_for_stop(event)
        stopped.set()

    with pytest.raises(ValueError, match="bad algorithm"):
        SharedMemoryExecutionStrategy().execute(algorithm, runner, InMemoryLightningStore())
    assert stopped.is_set()


def test_bundle_ignoring_stop_is_cancelled_after_graceful_delay() -> None:
    cancelled = threading.Event()

    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        return None

    async def stubborn_runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    strategy = SharedMemoryExecutionStrategy(main_thread="algorithm", graceful_delay=0.2, join_timeout=5.0)
    strategy.execute(algorithm, stubborn_runner, InMemoryLightningStore())
    assert cancelled.is_set()


def test_configuration_is_validated() -> None:
    with pytest.raises(ValueError, match="exactly one runner"):
        SharedMemoryExecutionStrategy(n_runners=2)
    with pytest.raises(ValueError, match="main_thread must be"):
        SharedMemoryExecutionStrategy(main_thread="both")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_runners must be >= 1"):
        SharedMemoryExecutionStrategy(n_runners=0, main_thread="algorithm")
