"""Trainer: component defaults, specs, deprecated aliases, dev(), and fit() end to end."""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from typing import Any, Optional

import pytest

import agentlightning as agl
from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.algorithm import Baseline, algo
from agentlightning.algorithm.base import Algorithm
from agentlightning.execution import ClientServerExecutionStrategy, SharedMemoryExecutionStrategy
from agentlightning.runner import Hook, LitAgentRunner
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import LLM, NamedResources, PromptTemplate, Rollout
from tests.execution.conftest import pick_free_port

AGENTOPS_INSTALLED = importlib.util.find_spec("agentops") is not None


class EchoAgent(agl.LitAgent[int]):
    """Returns the task as its reward, so results are easy to check."""

    async def rollout_async(self, task: int, resources: NamedResources, rollout: Rollout) -> float:
        return float(task)


class RecordingRunner(LitAgentRunner[Any]):
    def __init__(self, tracer: agl.Tracer, max_rollouts: Optional[int] = None, poll_interval: float = 0.05) -> None:
        super().__init__(tracer, max_rollouts=max_rollouts, poll_interval=poll_interval)
        self.received = {"tracer": tracer, "max_rollouts": max_rollouts}


class FullAlgorithm(Algorithm):
    async def run(self, train_dataset: Any = None, val_dataset: Any = None) -> None:
        return None


def fast_runner() -> dict[str, Any]:
    return {"poll_interval": 0.05, "heartbeat_interval": 60.0}


async def _wait_all(store: agl.LightningStore, ids: list[str]) -> list[Rollout]:
    while True:
        done = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
        if len(done) == len(ids):
            return done
        await asyncio.sleep(0.02)


# ---- construction ----


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGL_SERVER_PORT", raising=False)
    trainer = agl.Trainer()
    if AGENTOPS_INSTALLED:
        assert type(trainer.tracer).__name__ == "AgentOpsTracer"
    else:
        assert type(trainer.tracer) is OtelTracer
    assert isinstance(trainer.adapter, TracerTraceToTriplet)
    assert isinstance(trainer.strategy, ClientServerExecutionStrategy)
    assert trainer.strategy.n_runners == 1 and trainer.strategy.server_port == 4747
    assert isinstance(trainer.store, InMemoryLightningStore)
    assert trainer.store.capabilities.get("thread_safe") is True
    assert isinstance(trainer.runner, LitAgentRunner) and trainer.runner.tracer is trainer.tracer
    assert trainer.algorithm is None and trainer.llm_proxy is None and trainer.hooks == ()
    assert trainer.n_runners == 1 and trainer.max_rollouts is None


def test_port_and_strategy_specs() -> None:
    assert agl.Trainer(port=9999).strategy.server_port == 9999  # type: ignore[attr-defined]
    given = ClientServerExecutionStrategy(server_port=1234)
    assert agl.Trainer(strategy=given, port=5678).strategy is given and given.server_port == 5678
    cs = agl.Trainer(n_runners=8, strategy={"type": "cs", "server_port": 9999}).strategy
    assert isinstance(cs, ClientServerExecutionStrategy) and (cs.n_runners, cs.server_port) == (8, 9999)

    shm_trainer = agl.Trainer(strategy="shm")
    assert isinstance(shm_trainer.strategy, SharedMemoryExecutionStrategy)
    assert shm_trainer.store.capabilities["thread_safe"] is False

    by_dict = agl.Trainer(strategy={"type": "shm", "n_runners": 8, "main_thread": "algorithm"})
    assert by_dict.n_runners == 8
    by_instance = agl.Trainer(n_runners=2, strategy=SharedMemoryExecutionStrategy(main_thread="algorithm", n_runners=4))
    assert by_instance.n_runners == 4
    with pytest.raises(ValueError, match="exactly one runner"):
        agl.Trainer(n_runners=2, strategy="shm")
    with pytest.raises(ValueError, match="unknown component name 'threads'"):
        agl.Trainer(strategy="threads")


def test_component_specs() -> None:
    trainer = agl.Trainer(
        tracer="otel",
        adapter={"agent_match": "planner"},
        runner=RecordingRunner,
        max_rollouts=3,
        store={"type": "memory", "thread_safe": True},
        algorithm="agentlightning.algorithm.Baseline",
    )
    assert type(trainer.tracer) is OtelTracer
    assert isinstance(trainer.adapter, TracerTraceToTriplet)
    assert isinstance(trainer.runner, RecordingRunner)
    assert trainer.runner.received == {"tracer": trainer.tracer, "max_rollouts": 3}
    assert isinstance(trainer.algorithm, Baseline)
    with pytest.raises(TypeError, match="tracer must be an instance of Tracer"):
        agl.Trainer(tracer=lambda: "not a tracer")
    with pytest.raises(TypeError, match="algorithm"):
        agl.Trainer(algorithm=InMemoryLightningStore)


def test_hooks_are_normalized() -> None:
    hook = Hook()
    assert agl.Trainer(hooks=hook).hooks == (hook,)
    assert agl.Trainer(hooks=[hook, hook]).hooks == (hook, hook)
    with pytest.raises(TypeError, match="hooks must be agl.Hook"):
        agl.Trainer(hooks=["nope"])  # type: ignore[list-item]


def test_deprecated_aliases() -> None:
    with pytest.warns(DeprecationWarning, match="n_workers"):
        trainer = agl.Trainer(n_workers=2, strategy={"type": "cs"})
    assert trainer.n_runners == 2 and trainer.n_workers == 2
    with pytest.warns(DeprecationWarning, match="max_tasks"):
        trainer = agl.Trainer(max_tasks=5)
    assert trainer.max_rollouts == 5 and trainer.max_tasks == 5
    adapter = TracerTraceToTriplet()
    with pytest.warns(DeprecationWarning, match="triplet_exporter"):
        trainer = agl.Trainer(triplet_exporter=adapter)
    assert trainer.adapter is adapter and trainer.triplet_exporter is adapter
    with pytest.warns(DeprecationWarning, match="dev"):
        agl.Trainer(dev=True)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="disagree"):
        agl.Trainer(n_runners=1, n_workers=2)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="not both"):
        agl.Trainer(adapter=adapter, triplet_exporter=adapter)


def test_dev_rejects_non_fast_algorithms() -> None:
    trainer = agl.Trainer(algorithm=FullAlgorithm(), strategy="shm")
    with pytest.raises(TypeError, match="FastAlgorithm"):
        trainer.dev(EchoAgent(), [1])


# ---- end to end ----


def _tiny_algorithm(results: dict[str, Any]) -> Any:
    @algo
    async def tiny(*, store: agl.LightningStore, train_dataset: list[int], initial_resources: Any) -> None:
        ids = [(await store.enqueue_rollout(input=task, mode="train")).rollout_id for task in train_dataset]
        finished = await _wait_all(store, ids)
        results["statuses"] = [r.status for r in finished]
        results["rewards"] = []
        for rollout_id in ids:
            spans = await store.query_spans(rollout_id)
            results["rewards"].append(agl.find_final_reward(list(spans)))
        results["resources"] = initial_resources

    return tiny


def test_fit_shared_memory_end_to_end() -> None:
    results: dict[str, Any] = {}
    hook_calls: list[str] = []

    class CountingHook(Hook):
        async def on_rollout_end(self, *, agent: Any, runner: Any, rollout: Any, spans: Any) -> None:
            hook_calls.append(rollout.rollout_id)

    resources = {"prompt": PromptTemplate(template="{x}", engine="f-string")}
    trainer = agl.Trainer(
        algorithm=_tiny_algorithm(results),
        strategy={"type": "shm", "main_thread": "algorithm", "n_runners": 2},
        tracer=OtelTracer(),
        runner=fast_runner(),
        hooks=CountingHook(),
        initial_resources=resources,  # type: ignore[arg-type]
    )
    trainer.fit(EchoAgent(), [1, 2, 3])
    assert results["statuses"] == ["succeeded"] * 3
    assert results["rewards"] == [1.0, 2.0, 3.0]
    assert results["resources"] == resources
    assert len(hook_calls) == 3


@pytest.mark.slow
def test_fit_client_server_end_to_end() -> None:
    results: dict[str, Any] = {}
    trainer = agl.Trainer(
        algorithm=_tiny_algorithm(results),
        n_runners=2,
        strategy={"type": "cs", "server_host": "127.0.0.1", "graceful_timeout": 3.0, "terminate_timeout": 3.0},
        port=pick_free_port(),
        tracer=OtelTracer(),
        runner=fast_runner(),
    )
    trainer.fit(EchoAgent(), [4, 5, 6, 7])
    assert results["statuses"] == ["succeeded"] * 4
    assert results["rewards"] == [4.0, 5.0, 6.0, 7.0]


class NonFiniteRewardAgent(agl.LitAgent[int]):
    """Returns NaN for even tasks and infinity for odd ones: neither may leave a rollout running forever."""

    async def rollout_async(self, task: int, resources: NamedResources, rollout: Rollout) -> float:
        return float("nan") if task % 2 == 0 else float("inf")


@pytest.mark.slow
def test_fit_returns_when_the_agent_returns_a_non_finite_reward() -> None:
    """Over HTTP a NaN reward used to leave its rollout `preparing` forever, so fit never returned."""
    results: dict[str, Any] = {}
    trainer = agl.Trainer(
        algorithm=_tiny_algorithm(results),
        n_runners=1,
        strategy={"type": "cs", "server_host": "127.0.0.1", "graceful_timeout": 3.0, "terminate_timeout": 3.0},
        port=pick_free_port(),
        tracer=OtelTracer(),
        runner=fast_runner(),
    )
    thread = threading.Thread(target=trainer.fit, args=(NonFiniteRewardAgent(), [2, 3]), daemon=True)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive(), "fit did not return"
    assert results["statuses"] == ["failed", "failed"]
    assert results["rewards"] == [None, None]


def test_sync_algorithm_runs_in_its_own_thread() -> None:
    seen: dict[str, Any] = {}

    @algo
    def sync_algorithm(store: agl.LightningStore) -> None:
        seen["thread"] = threading.current_thread().name

        async def work() -> list[Rollout]:
            rollout = await store.enqueue_rollout(input=9)
            return await _wait_all(store, [rollout.rollout_id])

        # A sync algorithm may start its own event loop.
        seen["statuses"] = [r.status for r in asyncio.run(work())]

    trainer = agl.Trainer(
        algorithm=sync_algorithm,
        strategy={"type": "shm", "main_thread": "algorithm"},
        tracer=OtelTracer(),
        runner=fast_runner(),
    )
    trainer.fit(EchoAgent(), [])
    assert seen["statuses"] == ["succeeded"]
    assert seen["thread"] == "AgentLightning-FunctionalAlgorithm"


def test_max_rollouts_stops_the_runner() -> None:
    results: dict[str, Any] = {}

    @algo
    async def enqueue_three(*, store: agl.LightningStore) -> None:
        ids = [(await store.enqueue_rollout(input=i)).rollout_id for i in range(3)]
        # Only two will run; the runner on the main thread stops after max_rollouts.
        while len(await store.wait_for_rollouts(rollout_ids=ids, timeout=0)) < 2:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        results["finished"] = len(await store.wait_for_rollouts(rollout_ids=ids, timeout=0))

    trainer = agl.Trainer(
        algorithm=enqueue_three, strategy="shm", max_rollouts=2, tracer=OtelTracer(), runner=fast_runner()
    )
    trainer.fit(EchoAgent(), [])
    assert results["finished"] == 2


def test_dev_runs_baseline_and_logs_rollouts(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="agentlightning.algorithm.baseline")
    trainer = agl.Trainer(
        algorithm=Baseline(polling_interval=0.05),
        strategy="shm",
        tracer=OtelTracer(),
        runner=fast_runner(),
        initial_resources={
            "prompt": PromptTemplate(template="{x}", engine="f-string"),
            "llm": LLM(endpoint="http://127.0.0.1:1/v1", model="m", api_key="sk-never-logged"),
        },
    )
    trainer.dev(EchoAgent(), [1, 2], val_dataset=[3])
    text = caplog.text
    assert "Initial resources set" in text and "http://127.0.0.1:1/v1" in text
    assert "sk-never-logged" not in text  # secrets stay out of logs
    assert text.count("Finished with status succeeded") == 3
    assert "in val mode with sample: 3" in text
    assert "Attribute keys:" in text
    assert "Adapted data:" in text
    assert "Finished 3 rollouts." in text


def test_llm_proxy_spec_gets_the_store_and_reaches_the_algorithm() -> None:
    from agentlightning.llm_proxy import LLMProxy

    seen: dict[str, Any] = {}

    @algo
    async def needs_proxy(*, llm_proxy: Any, store: agl.LightningStore) -> None:
        seen["proxy"], seen["store"] = llm_proxy, store

    trainer = agl.Trainer(
        algorithm=needs_proxy,
        strategy={"type": "shm", "main_thread": "algorithm"},
        llm_proxy={"launch_mode": "thread"},
        tracer=OtelTracer(),
        runner=fast_runner(),
    )
    assert isinstance(trainer.llm_proxy, LLMProxy)
    assert trainer.llm_proxy.get_store() is trainer.store
    trainer.fit(EchoAgent(), [])
    # The algorithm sees the proxy, now pointed at the store the strategy handed out (the threaded facade).
    assert seen["proxy"] is trainer.llm_proxy
    assert trainer.llm_proxy.get_store() is seen["store"]
