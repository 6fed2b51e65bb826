"""ClientServerExecutionStrategy with plain bundles: configuration, roles, stop and failure propagation."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from agentlightning.execution import ClientServerExecutionStrategy, ExecutionEvent
from agentlightning.store.base import LightningStore
from agentlightning.store.memory import InMemoryLightningStore

from .conftest import leftover_children


def strategy(port: int, **kwargs: Any) -> ClientServerExecutionStrategy:
    kwargs.setdefault("graceful_timeout", 3.0)
    kwargs.setdefault("terminate_timeout", 2.0)
    return ClientServerExecutionStrategy(role="both", server_host="127.0.0.1", server_port=port, **kwargs)


async def _wait_terminal(store: LightningStore, ids: list[str]) -> list[Any]:
    while True:
        done = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
        if len(done) == len(ids):
            return done
        await asyncio.sleep(0.05)


async def working_runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
    """Dequeue and succeed rollouts until stopped, tagging each attempt with the process id."""
    while not event.is_set():
        rollout = await store.dequeue_rollout(worker_id=f"worker-{worker_id}")
        if rollout is None:
            await asyncio.sleep(0.05)
            continue
        await store.update_attempt(
            rollout.rollout_id,
            rollout.attempt.attempt_id,
            status="succeeded",
            metadata={"pid": os.getpid(), "store": type(store).__name__},
        )


# ---- configuration ----


def test_environment_configures_the_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_SERVER_PORT", "10000")
    monkeypatch.setenv("AGL_SERVER_HOST", "0.0.0.0")
    monkeypatch.setenv("AGL_CURRENT_ROLE", "algorithm")
    monkeypatch.setenv("AGL_MANAGED_STORE", "0")
    cs = ClientServerExecutionStrategy(n_runners=8)
    assert (cs.server_port, cs.server_host, cs.role, cs.managed_store) == (10000, "0.0.0.0", "algorithm", False)
    assert cs.endpoint == "http://127.0.0.1:10000"
    explicit = ClientServerExecutionStrategy(
        role="runner", server_host="10.0.0.4", server_port=9999, managed_store=True
    )
    assert (explicit.role, explicit.endpoint, explicit.managed_store) == ("runner", "http://10.0.0.4:9999", True)


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AGL_SERVER_PORT", "AGL_SERVER_HOST", "AGL_CURRENT_ROLE", "AGL_MANAGED_STORE"):
        monkeypatch.delenv(name, raising=False)
    cs = ClientServerExecutionStrategy()
    assert (cs.role, cs.server_host, cs.server_port, cs.managed_store) == ("both", "localhost", 4747, True)
    assert (cs.graceful_timeout, cs.terminate_timeout, cs.allowed_exit_codes) == (10.0, 10.0, (0, -15))
    assert cs.main_process == "algorithm" and cs.n_runners == 1


def test_invalid_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_CURRENT_ROLE", "trainer")
    with pytest.raises(ValueError, match="role 'trainer'"):
        ClientServerExecutionStrategy()
    monkeypatch.delenv("AGL_CURRENT_ROLE")
    with pytest.raises(ValueError, match="main_process='runner' needs"):
        ClientServerExecutionStrategy(main_process="runner", n_runners=2)
    with pytest.raises(ValueError, match="n_runners must be >= 1"):
        ClientServerExecutionStrategy(n_runners=0)


# ---- both roles in one call ----


def test_runners_in_processes_serve_the_algorithm_over_http(free_port: int) -> None:
    results: dict[str, Any] = {}

    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        ids = [(await store.enqueue_rollout(input=i)).rollout_id for i in range(6)]
        await _wait_terminal(store, ids)
        results["attempts"] = [await store.get_latest_attempt(i) for i in ids]

    backing = InMemoryLightningStore(thread_safe=True)
    strategy(free_port, n_runners=2).execute(algorithm, working_runner, backing)
    attempts = results["attempts"]
    assert all(a.status == "succeeded" for a in attempts)
    pids = {a.metadata["pid"] for a in attempts}
    assert os.getpid() not in pids
    assert {a.metadata["store"] for a in attempts} == {"LightningStoreClient"}
    assert leftover_children() == []


def test_algorithm_crash_stops_runners_and_is_raised(free_port: int) -> None:
    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        await store.enqueue_rollout(input="x")
        raise RuntimeError("algorithm blew up")

    with pytest.raises(RuntimeError, match="algorithm blew up"):
        strategy(free_port, n_runners=2).execute(algorithm, working_runner, InMemoryLightningStore(thread_safe=True))
    assert leftover_children() == []


def test_runner_crash_does_not_hang_the_algorithm(free_port: int) -> None:
    seen: dict[str, bool] = {}

    async def patient_algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        await store.enqueue_rollout(input="never processed")
        while not event.is_set():
            await asyncio.sleep(0.05)
        seen["stop"] = True

    async def crashing_runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        raise RuntimeError("runner init failed")

    with pytest.raises(RuntimeError, match=r"AgentLightning-Runner-0 .*exited with code 1"):
        strategy(free_port).execute(patient_algorithm, crashing_runner, InMemoryLightningStore(thread_safe=True))
    assert seen == {"stop": True}


def test_runner_ignoring_the_stop_event_is_escalated(free_port: int) -> None:
    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        return None

    async def deaf_runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        await asyncio.sleep(3600)

    # The stop event is ignored, so the runner only ends at the SIGINT step (exit code 0: interrupted).
    strategy(free_port, graceful_timeout=0.5, terminate_timeout=5.0).execute(
        algorithm, deaf_runner, InMemoryLightningStore(thread_safe=True)
    )
    assert leftover_children() == []


def test_runner_on_main_process(free_port: int) -> None:
    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        ids = [(await store.enqueue_rollout(input=i)).rollout_id for i in range(2)]
        await _wait_terminal(store, ids)

    calls: list[int] = []

    async def runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        calls.append(os.getpid())
        await working_runner(store, worker_id, event)

    strategy(free_port, main_process="runner").execute(algorithm, runner, InMemoryLightningStore(thread_safe=True))
    # The runner ran here and stopped once the algorithm (in a child process) finished.
    assert calls == [os.getpid()]
    assert leftover_children() == []


def test_algorithm_role_serves_the_store(free_port: int) -> None:
    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        from agentlightning.store_http.client import LightningStoreClient

        client = LightningStoreClient(f"http://127.0.0.1:{free_port}")
        try:
            rollout = await client.enqueue_rollout(input="via http")
            assert (await store.get_rollout_by_id(rollout.rollout_id)) is not None
        finally:
            await client.close()

    async def unused_runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        raise AssertionError("the algorithm role never runs runners")

    backing = InMemoryLightningStore(thread_safe=True)
    ClientServerExecutionStrategy(role="algorithm", server_host="127.0.0.1", server_port=free_port).execute(
        algorithm, unused_runner, backing
    )
    assert len(asyncio.run(backing.query_rollouts())) == 1


def test_unmanaged_store_is_passed_to_both_sides(free_port: int) -> None:
    seen: list[str] = []

    async def algorithm(store: LightningStore, event: ExecutionEvent) -> None:
        seen.append(type(store).__name__)

    async def runner(store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        seen.append(type(store).__name__)

    backing = InMemoryLightningStore(thread_safe=True)
    ClientServerExecutionStrategy(role="runner", server_port=free_port, managed_store=False).execute(
        algorithm, runner, backing
    )
    ClientServerExecutionStrategy(role="algorithm", server_port=free_port, managed_store=False).execute(
        algorithm, runner, backing
    )
    assert seen == ["InMemoryLightningStore", "InMemoryLightningStore"]
