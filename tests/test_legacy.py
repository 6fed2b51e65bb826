"""The deprecated v0.1 API: AgentLightningServer, AgentLightningClient, DevTaskLoader, LegacyAgentRunner, fit_v0."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import agentlightning as agl
from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.client import AgentLightningClient, DevTaskLoader
from agentlightning.emitter import emit_reward
from agentlightning.litagent import LitAgent, rollout
from agentlightning.runner import LegacyAgentRunner
from agentlightning.server import AgentLightningServer
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import NamedResources, PromptTemplate, Rollout, RolloutLegacy, Task, Triplet
from agentlightning.utils.deprecation import reset_deprecation_warnings

RESOURCES: NamedResources = {"prompt": PromptTemplate(template="Solve {x}")}


@pytest.fixture(autouse=True)
def quiet_deprecations() -> Iterator[None]:
    """Each test sees the legacy warnings afresh but does not fail on them."""
    reset_deprecation_warnings()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


@pytest.fixture
def server() -> Iterator[AgentLightningServer]:
    srv = AgentLightningServer(port=0, task_timeout_seconds=30.0)
    asyncio.run(srv.start())
    try:
        yield srv
    finally:
        asyncio.run(srv.stop())


@pytest.fixture
def tracer() -> Iterator[OtelTracer]:
    yield OtelTracer(instrument_openai=False)


@rollout
def half_of_x(task: dict[str, Any], prompt_template: PromptTemplate) -> float:
    assert prompt_template.format(x=task["x"]) == f"Solve {task['x']}"
    return task["x"] * 0.5


@rollout
def emits_its_reward(task: dict[str, Any], prompt_template: PromptTemplate) -> None:
    emit_reward(float(task["x"]))


class Scripted(LitAgent[Any]):
    """Returns (or raises) `result` and records the legacy lifecycle hooks."""

    def __init__(self, result: Any) -> None:
        super().__init__()
        self.result = result
        self.events: list[tuple[str, str]] = []

    def on_rollout_start(self, task: Any, runner: Any, tracer: Any) -> None:
        self.events.append(("start", task.rollout_id))

    def on_rollout_end(self, task: Any, rollout: Any, runner: Any, tracer: Any) -> None:
        self.events.append(("end", rollout.rollout_id))

    def rollout(self, task: Any, resources: NamedResources, rollout: Rollout) -> Any:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


async def run_runner(runner: LegacyAgentRunner[Any]) -> None:
    runner.init(runner.agent)
    runner.init_worker(0)
    try:
        await runner.iter()
    finally:
        runner.teardown_worker(0)
        runner.teardown()


# ---- deprecation ----


def test_each_legacy_entry_point_warns_once_and_names_its_replacement(tracer: OtelTracer) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            AgentLightningServer(port=0)
            client = AgentLightningClient("http://127.0.0.1:1")
            DevTaskLoader([1], RESOURCES)
            LegacyAgentRunner(half_of_x, client, tracer)
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    replacements = {
        "AgentLightningServer": "LightningStoreServer",
        "AgentLightningClient": "LightningStoreClient",
        "DevTaskLoader": "Trainer.dev",
        "LegacyAgentRunner": "LitAgentRunner",
    }
    assert sorted(message.split()[0] for message in messages) == sorted(replacements)
    for message in messages:
        assert replacements[message.split()[0]] in message


# ---- server and client ----


def test_sync_client_round_trip(server: AgentLightningServer) -> None:
    client = AgentLightningClient(server.endpoint, poll_interval=0.01)
    assert client.get_latest_resources() is None
    assert client.poll_next_task(max_polls=1) is None

    resources_id = asyncio.run(server.update_resources(RESOURCES))
    rollout_id = asyncio.run(server.queue_task({"x": 3}, mode="train", metadata={"split": "a"}))

    task = client.poll_next_task()
    assert task is not None
    assert (task.rollout_id, task.input, task.mode, task.resources_id) == (rollout_id, {"x": 3}, "train", resources_id)
    assert task.num_claims == 1 and task.metadata == {"split": "a"}
    latest = client.get_latest_resources()
    assert latest is not None and latest.resources_id == resources_id
    assert latest.resources["prompt"] == RESOURCES["prompt"]
    by_id = client.get_resources_by_id(resources_id)
    assert by_id is not None and by_id.resources == latest.resources
    assert client.get_resources_by_id("rs-unknown") is None

    answer = client.post_rollout(RolloutLegacy(rollout_id=rollout_id, final_reward=0.75))
    assert answer is not None and answer["status"] == "success" and rollout_id in answer["message"]
    completed = asyncio.run(server.get_completed_rollout(rollout_id))
    assert completed is not None and completed.final_reward == 0.75
    assert completed.task is not None and completed.task.rollout_id == rollout_id  # filled in by the server
    assert asyncio.run(server.get_completed_rollout(rollout_id)) is None  # taken out


async def test_async_client_round_trip(server: AgentLightningServer) -> None:
    client = AgentLightningClient(server.endpoint, poll_interval=0.01)
    resources_id = await server.update_resources(RESOURCES)
    first = await server.queue_task("a")
    second = await server.queue_task("b", resources_id="rs-pinned")

    task_a = await client.poll_next_task_async()
    task_b = await client.poll_next_task_async()
    assert task_a is not None and task_b is not None
    assert [task_a.rollout_id, task_b.rollout_id] == [first, second]  # FIFO
    assert (task_a.resources_id, task_b.resources_id) == (resources_id, "rs-pinned")
    assert await client.poll_next_task_async(max_polls=2) is None
    assert (await client.get_resources_by_id_async(resources_id)) is not None
    latest = await client.get_latest_resources_async()
    assert latest is not None and latest.resources_id == resources_id

    waiting = asyncio.create_task(server.poll_completed_rollout(first, timeout=30))
    await client.post_rollout_async(RolloutLegacy(rollout_id=first, final_reward=1.0))
    got = await waiting
    assert got is not None and got.final_reward == 1.0
    await client.post_rollout_async(RolloutLegacy(rollout_id=second, final_reward=0.0))
    assert [r.rollout_id for r in await server.retrieve_completed_rollouts()] == [second]
    assert await server.retrieve_completed_rollouts() == []


async def test_poll_completed_rollout_gives_none_after_its_timeout(server: AgentLightningServer) -> None:
    rollout_id = await server.queue_task("never finished")
    assert await server.poll_completed_rollout(rollout_id, timeout=0.01) is None


def test_unclaimed_task_timeout_requeues_it_at_the_tail() -> None:
    srv = AgentLightningServer(port=0, task_timeout_seconds=5.0)
    now = [1000.0]
    srv.clock = lambda: now[0]
    asyncio.run(srv.start())
    try:
        client = AgentLightningClient(srv.endpoint, poll_interval=0.01)
        stale = asyncio.run(srv.queue_task("slow"))
        claimed = client.poll_next_task()
        assert claimed is not None and claimed.rollout_id == stale
        other = asyncio.run(srv.queue_task("next"))

        now[0] += 4.0  # within the timeout: the claim holds
        nxt = client.poll_next_task()
        assert nxt is not None and nxt.rollout_id == other
        assert client.poll_next_task(max_polls=1) is None

        now[0] += 2.0  # the first claim is now 6 s old
        again = client.poll_next_task(max_polls=1)
        assert again is not None and again.rollout_id == stale and again.num_claims == 2

        # A late rollout for a requeued task still completes it and takes it off the queue.
        now[0] += 10.0
        client.post_rollout(RolloutLegacy(rollout_id=other, final_reward=0.5))
        assert client.poll_next_task(max_polls=1) is not None  # `stale` was requeued once more
        client.post_rollout(RolloutLegacy(rollout_id=stale, final_reward=0.1))
        now[0] += 10.0
        assert client.poll_next_task(max_polls=1) is None
        assert {r.rollout_id for r in asyncio.run(srv.retrieve_completed_rollouts())} == {stale, other}
    finally:
        asyncio.run(srv.stop())


async def test_client_answers_none_when_the_server_cannot_be_reached() -> None:
    """v0.3's client returns None on any failed request (it never raises from these calls)."""
    from agentlightning.web.launcher import pick_free_port

    client = AgentLightningClient(f"http://127.0.0.1:{pick_free_port()}", poll_interval=0.01, timeout=2.0)
    assert client.get_latest_resources() is None
    assert client.get_resources_by_id("rs-1") is None
    assert client.post_rollout(RolloutLegacy(rollout_id="ro-1", final_reward=1.0)) is None
    assert await client.get_latest_resources_async() is None
    assert await client.get_resources_by_id_async("rs-1") is None
    assert await client.post_rollout_async(RolloutLegacy(rollout_id="ro-1", final_reward=1.0)) is None


def test_server_rejects_non_positive_task_timeout() -> None:
    with pytest.raises(ValueError, match="task_timeout_seconds"):
        AgentLightningServer(task_timeout_seconds=0)


# ---- DevTaskLoader ----


def test_dev_task_loader_serves_tasks_in_a_cycle_with_fixed_resources() -> None:
    fixed = Task(rollout_id="ro-fixed", input="given")
    loader = DevTaskLoader([1, fixed], RESOURCES, poll_interval=0.01)
    served = [loader.poll_next_task() for _ in range(4)]
    assert [t.input for t in served if t is not None] == [1, "given", 1, "given"]
    ids = [t.rollout_id for t in served if t is not None]
    # v0.3's shapes: tasks named by their place in the list, resources "local".
    assert ids == ["local_task_001", "ro-fixed", "local_task_001", "ro-fixed"]
    latest = loader.get_latest_resources()
    assert latest is not None and latest.resources == RESOURCES and latest.resources_id == "local"
    assert served[0] is not None and served[0].resources_id == "local"
    assert loader.get_resources_by_id("local") is latest
    with pytest.raises(ValueError, match="rs-other"):
        loader.get_resources_by_id("rs-other")
    answer = loader.post_rollout(RolloutLegacy(rollout_id=ids[0], final_reward=1.0))
    assert answer == {"status": "received", "rollout_id": "local_task_001"}
    assert [r.rollout_id for r in loader.rollouts] == [ids[0]]


def test_dev_task_loader_needs_tasks() -> None:
    with pytest.raises(ValueError, match="at least one task"):
        DevTaskLoader([], RESOURCES)


# ---- LegacyAgentRunner ----


async def test_runner_runs_tasks_from_the_server_and_posts_final_rewards(
    server: AgentLightningServer, tracer: OtelTracer
) -> None:
    await server.update_resources(RESOURCES)
    ids = [await server.queue_task({"x": x}, mode="train") for x in (1, 2, 3)]
    client = AgentLightningClient(server.endpoint, poll_interval=0.01)
    runner = LegacyAgentRunner(half_of_x, client, tracer, triplet_exporter=TracerTraceToTriplet(), max_tasks=3)
    await run_runner(runner)

    for rollout_id, x in zip(ids, (1, 2, 3), strict=True):
        done = await server.poll_completed_rollout(rollout_id, timeout=10)
        assert done is not None
        assert done.final_reward == x * 0.5
        assert done.task is not None and done.task.input == {"x": x}
        assert done.trace and done.trace[-1]["name"] == "agentlightning.annotation"  # the reward span
        assert all(span["rollout_id"] == rollout_id for span in done.trace)
        assert done.triplets == []  # no LLM calls


async def test_runner_idles_without_tasks_until_its_stop_event(
    server: AgentLightningServer, tracer: OtelTracer
) -> None:
    client = AgentLightningClient(server.endpoint, poll_interval=0.01)
    runner = LegacyAgentRunner(Scripted(1.0), client, tracer)
    runner.init(runner.agent)
    runner.init_worker(0)
    stop = asyncio.Event()
    running = asyncio.create_task(runner.iter(event=stop))
    try:
        rollout_id = await server.queue_task("late arrival")
        done = await server.poll_completed_rollout(rollout_id, timeout=10)
        assert done is not None and done.final_reward == 1.0
        stop.set()
        await asyncio.wait_for(running, timeout=10)
    finally:
        runner.teardown_worker(0)
        runner.teardown()


async def test_runner_takes_rewards_emitted_inside_the_trace(tracer: OtelTracer) -> None:
    loader = DevTaskLoader([{"x": 2}, {"x": 5}], RESOURCES, poll_interval=0.01)
    await run_runner(LegacyAgentRunner(emits_its_reward, loader, tracer, max_tasks=2))
    assert [r.final_reward for r in loader.rollouts] == [2.0, 5.0]
    assert all(r.trace for r in loader.rollouts)


@pytest.mark.parametrize(
    ("result", "reward", "n_triplets"),
    [
        ([Triplet(prompt="p", response="r", reward=0.25)], 0.25, 1),
        (RolloutLegacy(rollout_id="ignored", final_reward=0.9, triplets=[]), 0.9, 0),
        ([{"name": "custom"}], None, None),
        ("not a result", None, None),
    ],
)
async def test_runner_accepts_the_legacy_result_types(
    tracer: OtelTracer, result: Any, reward: float | None, n_triplets: int | None
) -> None:
    loader = DevTaskLoader(["task"], RESOURCES, poll_interval=0.01)
    await run_runner(LegacyAgentRunner(Scripted(result), loader, tracer, max_tasks=1))
    (posted,) = loader.rollouts
    assert posted.rollout_id == "local_task_001"
    assert posted.final_reward == reward
    assert (None if posted.triplets is None else len(posted.triplets)) == n_triplets
    if isinstance(result, list) and isinstance(result[0], dict):
        assert posted.trace == result


async def test_failing_agent_posts_a_rollout_with_the_error(tracer: OtelTracer) -> None:
    agent = Scripted(RuntimeError("agent broke"))
    loader = DevTaskLoader(["a", "b"], RESOURCES, poll_interval=0.01)
    await run_runner(LegacyAgentRunner(agent, loader, tracer, max_tasks=2))
    assert len(loader.rollouts) == 2
    for posted in loader.rollouts:
        assert posted.final_reward is None
        assert posted.metadata["error"] == "RuntimeError: agent broke"
    assert [kind for kind, _ in agent.events] == ["start", "end", "start", "end"]


async def test_unknown_resources_id_fails_the_task(server: AgentLightningServer, tracer: OtelTracer) -> None:
    rollout_id = await server.queue_task("x", resources_id="rs-missing")
    client = AgentLightningClient(server.endpoint, poll_interval=0.01)
    await run_runner(LegacyAgentRunner(Scripted(1.0), client, tracer, max_tasks=1))
    done = await server.poll_completed_rollout(rollout_id, timeout=10)
    assert done is not None and "rs-missing" in done.metadata["error"]


async def test_step_runs_one_input_without_the_queue(tracer: OtelTracer) -> None:
    loader = DevTaskLoader(["unused"], RESOURCES, poll_interval=0.01)
    runner = LegacyAgentRunner(half_of_x, loader, tracer)
    runner.init(half_of_x)
    runner.init_worker(0)
    try:
        result = await runner.step({"x": 4}, mode="val")
        assert result.status == "succeeded" and result.metadata is not None
        assert result.metadata["final_reward"] == 2.0
        assert loader.rollouts == []
        with pytest.raises(KeyError):
            await runner.step({"no_x": 1})
    finally:
        runner.teardown_worker(0)
        runner.teardown()


# ---- Trainer.fit with a URL ----


def test_trainer_fit_with_a_url_runs_fit_v0(server: AgentLightningServer, tracer: OtelTracer) -> None:
    asyncio.run(server.update_resources(RESOURCES))
    ids = [asyncio.run(server.queue_task({"x": x})) for x in (2, 4)]
    trainer = agl.Trainer(n_runners=1, max_rollouts=2, tracer=tracer, strategy="shm")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(half_of_x, server.endpoint)
    assert any("Trainer.fit(agent, train_dataset)" in str(w.message) for w in caught)
    done = {r.rollout_id: r for r in asyncio.run(server.retrieve_completed_rollouts())}
    assert {rid: done[rid].final_reward for rid in ids} == {ids[0]: 1.0, ids[1]: 2.0}
    assert all(r.triplets == [] for r in done.values())  # the trainer's adapter made the triplets


def test_fit_v0_runs_several_runner_processes(server: AgentLightningServer, tracer: OtelTracer) -> None:
    asyncio.run(server.update_resources(RESOURCES))
    ids = {asyncio.run(server.queue_task({"x": x})) for x in range(4)}
    trainer = agl.Trainer(n_runners=2, max_rollouts=2, tracer=tracer)
    trainer.fit_v0(half_of_x, server.endpoint)
    done = asyncio.run(server.retrieve_completed_rollouts())
    assert {r.rollout_id for r in done} == ids
    assert sorted(-1.0 if r.final_reward is None else r.final_reward for r in done) == [0.0, 0.5, 1.0, 1.5]


def test_fit_v0_in_dev_mode_uses_the_dev_backend(tracer: OtelTracer) -> None:
    loader = DevTaskLoader([{"x": 6}], RESOURCES, poll_interval=0.01)
    trainer = agl.Trainer(dev=True, max_rollouts=1, tracer=tracer, strategy="shm")
    trainer.fit_v0(half_of_x, "http://127.0.0.1:1", dev_backend=loader)
    assert [r.final_reward for r in loader.rollouts] == [3.0]


def test_fit_v0_takes_dev_data_as_in_v03(tracer: OtelTracer) -> None:
    loader = DevTaskLoader([{"x": 6}], RESOURCES, poll_interval=0.01)
    trainer = agl.Trainer(dev=True, max_rollouts=1, tracer=tracer, strategy="shm")
    trainer.fit_v0(half_of_x, "http://127.0.0.1:1", val_data=None, dev_data=loader)
    assert [r.final_reward for r in loader.rollouts] == [3.0]
    with pytest.raises(ValueError, match="dev_data and dev_backend"):
        trainer.fit_v0(half_of_x, "http://127.0.0.1:1", dev_data=loader, dev_backend=loader)


class V01Agent(LitAgent[Any]):
    """A v0.1 agent: `training_rollout(self, task, rollout_id, resources)`, as v0.3's examples still write it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, str, Any]] = []

    def training_rollout(self, task: Any, rollout_id: str, resources: NamedResources) -> float:  # type: ignore[override]
        self.calls.append((task, rollout_id, resources))
        return float(task["x"])

    def validation_rollout(self, task: Any, rollout_id: str, resources: NamedResources) -> float:  # type: ignore[override]
        return self.training_rollout(task, rollout_id, resources)


class V01AsyncAgent(LitAgent[Any]):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, str, Any]] = []

    async def training_rollout_async(self, task: Any, rollout_id: str, resources: NamedResources) -> float:  # type: ignore[override]
        self.calls.append((task, rollout_id, resources))
        return float(task["x"]) * 2

    async def validation_rollout_async(self, task: Any, rollout_id: str, resources: NamedResources) -> float:  # type: ignore[override]
        return await self.training_rollout_async(task, rollout_id, resources)


@pytest.mark.parametrize(("agent_class", "factor"), [(V01Agent, 1.0), (V01AsyncAgent, 2.0)])
async def test_legacy_runner_calls_a_v01_training_rollout_with_its_arguments(
    tracer: OtelTracer, agent_class: type[Any], factor: float
) -> None:
    agent = agent_class()
    loader = DevTaskLoader([Task(rollout_id="ro-1", input={"x": 3}, mode="train")], RESOURCES, poll_interval=0.01)
    await run_runner(LegacyAgentRunner(agent, loader, tracer, max_tasks=1))
    assert agent.calls == [({"x": 3}, "ro-1", RESOURCES)]  # not the rollout object as `resources`
    assert [r.final_reward for r in loader.rollouts] == [3.0 * factor]


def test_trainer_fit_with_a_dev_task_loader_runs_the_v01_flow(tracer: OtelTracer) -> None:
    loader = DevTaskLoader([{"x": 6}, {"x": 8}], RESOURCES, poll_interval=0.01)
    trainer = agl.Trainer(max_rollouts=2, tracer=tracer, strategy="shm")
    trainer.fit(half_of_x, loader)  # type: ignore[arg-type]
    assert [r.final_reward for r in loader.rollouts] == [3.0, 4.0]


def test_trainer_fit_with_an_endless_dev_task_loader_raises_instead_of_hanging(tracer: OtelTracer) -> None:
    loader = DevTaskLoader([{"x": 6}], RESOURCES, poll_interval=0.01)
    trainer = agl.Trainer(tracer=tracer, strategy="shm")
    with pytest.raises(TypeError, match="run for ever.*fit_v0"):
        trainer.fit(half_of_x, loader)  # type: ignore[arg-type]
    assert loader.rollouts == []
