"""LitAgentRunner: hook order, failures, stopping, heartbeats and the handling of each return type."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Optional

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from agentlightning.emitter import emit_message, get_reward_value
from agentlightning.litagent import LitAgent, prompt_rollout
from agentlightning.runner import Hook, LitAgentRunner, Runner
from agentlightning.store.base import UNSET, LightningStore
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.store_http.client import LightningStoreClient
from agentlightning.store_http.server import LightningStoreServer
from agentlightning.tracer import DummyTracer
from agentlightning.tracer.base import get_active_tracer
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import (
    NamedResources,
    PromptTemplate,
    Rollout,
    RolloutConfig,
    Span,
    SpanCoreFields,
    TraceStatus,
    Worker,
)
from tests.store.backends import FakeClock


class Recorder(Hook):
    """Writes every hook call (and what it observed) into a shared event list."""

    def __init__(self, events: list[Any], store: LightningStore) -> None:
        super().__init__()
        self.events = events
        self.store = store
        self.rollout_end_spans: list[Any] = []
        self.status_at_rollout_end: Optional[str] = None

    async def on_rollout_start(self, *, agent: Any, runner: Any, rollout: Rollout) -> None:
        self.events.append(("on_rollout_start", get_active_tracer()))

    async def on_trace_start(self, *, agent: Any, runner: Any, tracer: Any, rollout: Rollout) -> None:
        self.events.append(("on_trace_start", get_active_tracer()))

    async def on_trace_end(self, *, agent: Any, runner: Any, tracer: Any, rollout: Rollout) -> None:
        self.events.append(("on_trace_end", get_active_tracer()))

    async def on_rollout_end(self, *, agent: Any, runner: Any, rollout: Rollout, spans: Any) -> None:
        self.events.append(("on_rollout_end", get_active_tracer()))
        self.rollout_end_spans = list(spans)
        attempt = await self.store.get_latest_attempt(rollout.rollout_id)
        assert attempt is not None
        self.status_at_rollout_end = attempt.status


class Exploding(Hook):
    """A hook that raises from every callback."""

    async def on_rollout_start(self, **kwargs: Any) -> None:
        raise RuntimeError("boom in on_rollout_start")

    async def on_trace_start(self, **kwargs: Any) -> None:
        raise RuntimeError("boom in on_trace_start")

    async def on_trace_end(self, **kwargs: Any) -> None:
        raise RuntimeError("boom in on_trace_end")

    async def on_rollout_end(self, **kwargs: Any) -> None:
        raise RuntimeError("boom in on_rollout_end")


class ReturnAgent(LitAgent[Any]):
    """Emits one message span, then returns whatever it was built with."""

    def __init__(self, result: Any = None) -> None:
        super().__init__()
        self.result = result

    async def rollout_async(self, task: Any, resources: NamedResources, rollout: Rollout) -> Any:
        emit_message(f"working on {task}")
        return self.result


class FailingAgent(LitAgent[Any]):
    async def rollout_async(self, task: Any, resources: NamedResources, rollout: Rollout) -> Any:
        emit_message("about to fail")
        raise ValueError(f"cannot handle {task!r}")


@pytest.fixture
def store() -> InMemoryLightningStore:
    return InMemoryLightningStore()


@pytest.fixture
def tracer() -> Iterator[OtelTracer]:
    yield OtelTracer(instrument_openai=False)


@pytest.fixture
def runner(tracer: OtelTracer) -> LitAgentRunner[Any]:
    return LitAgentRunner(tracer, poll_interval=0.05, heartbeat_interval=0)


def limited_runner(tracer: OtelTracer, max_rollouts: int) -> LitAgentRunner[Any]:
    return LitAgentRunner(tracer, max_rollouts=max_rollouts, poll_interval=0.05, heartbeat_interval=0)


@pytest.fixture
async def running(runner: LitAgentRunner[Any], store: InMemoryLightningStore) -> AsyncIterator[Any]:
    """A factory entering `run_context` for an agent (and hooks) for the rest of the test."""
    contexts: list[Any] = []

    def enter(agent: LitAgent[Any], hooks: Optional[list[Hook]] = None) -> LitAgentRunner[Any]:
        ctx = runner.run_context(agent=agent, store=store, hooks=hooks)
        contexts.append(ctx)
        return ctx.__enter__()  # type: ignore[return-value]

    yield enter
    for ctx in reversed(contexts):
        ctx.__exit__(None, None, None)


# ---- lifecycle and order ----


async def test_step_runs_the_agent_and_marks_the_rollout_succeeded(running: Any, store: InMemoryLightningStore) -> None:
    runner = running(ReturnAgent())
    rollout = await runner.step("task-1")
    assert rollout.status == "succeeded"
    assert rollout.input == "task-1"
    spans = await store.query_spans(rollout.rollout_id)
    assert [s.name for s in spans] == ["agentlightning.message"]
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt is not None and attempt.worker_id == "Worker-0" and attempt.status == "succeeded"


async def test_hooks_run_in_order_around_the_trace_context(
    running: Any, store: InMemoryLightningStore, tracer: OtelTracer
) -> None:
    events: list[Any] = []

    class Agent(LitAgent[str]):
        async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
            events.append(("agent", get_active_tracer()))
            emit_message("hello")
            return 0.5

    recorder = Recorder(events, store)
    runner = running(Agent(), [recorder])
    await runner.step("t")
    assert events == [
        ("on_rollout_start", None),
        ("on_trace_start", tracer),
        ("agent", tracer),
        ("on_trace_end", tracer),
        ("on_rollout_end", None),
    ]
    # on_rollout_end sees the posted spans, before the attempt is finalised.
    assert [s.name for s in recorder.rollout_end_spans] == ["agentlightning.message", "agentlightning.annotation"]
    assert recorder.status_at_rollout_end == "running"


async def test_run_context_links_agent_and_tears_down(store: InMemoryLightningStore, tracer: OtelTracer) -> None:
    runner: LitAgentRunner[Any] = LitAgentRunner(tracer, heartbeat_interval=0)
    agent = ReturnAgent()
    with pytest.raises(KeyError):
        with runner.run_context(agent=agent, store=store, worker_id=3) as entered:
            assert entered is runner
            assert agent.runner is runner and agent.get_tracer() is tracer
            assert runner.get_worker_id() == "Worker-3"
            assert runner.get_store() is store
            raise KeyError("user code failed")
    with pytest.raises(RuntimeError, match="has no store"):
        runner.get_store()
    with pytest.raises(RuntimeError, match="has no agent"):
        runner.get_agent()
    assert runner.worker_id is None and runner.get_worker_id() == "Worker-Unknown"
    with runner.run_context(agent=agent, store=store, worker_id=5):
        assert runner.worker_id == 5
    assert runner.worker_id is None  # reset on a normal exit too


def test_run_is_deprecated_and_worker_id_defaults(tracer: OtelTracer) -> None:
    runner: LitAgentRunner[Any] = LitAgentRunner(tracer)
    assert isinstance(runner, Runner)
    assert runner.get_worker_id() == "Worker-Unknown"
    with pytest.raises(RuntimeError, match="use `await runner.iter\\(\\)` or `runner.step\\(\\)`"):
        runner.run()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_rollouts": -1}, "max_rollouts"),
        ({"poll_interval": 0}, "poll_interval"),
        ({"interval_jitter": -1}, "interval_jitter"),
        ({"heartbeat_launch_mode": "process"}, "heartbeat_launch_mode"),
    ],
)
def test_bad_constructor_arguments_are_named(tracer: OtelTracer, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LitAgentRunner(tracer, **kwargs)


# ---- mode and resources ----


class ModeAgent(LitAgent[str]):
    def training_rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return 1.0

    def validation_rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return 0.0


class AsyncModeAgent(LitAgent[str]):
    async def training_rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return 1.0

    async def validation_rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return 0.0


@pytest.mark.parametrize("agent_cls", [ModeAgent, AsyncModeAgent])
@pytest.mark.parametrize("mode, expected", [("train", 1.0), ("val", 0.0), ("test", 0.0), (None, 0.0)])
async def test_train_mode_uses_training_variant_else_validation(
    running: Any, store: InMemoryLightningStore, agent_cls: type, mode: Any, expected: float
) -> None:
    runner = running(agent_cls())
    rollout = await runner.step("t", mode=mode)
    spans = await store.query_spans(rollout.rollout_id)
    assert [get_reward_value(s) for s in spans] == [expected]


async def test_step_resources_reach_the_agent(running: Any, store: InMemoryLightningStore) -> None:
    @prompt_rollout
    def agent(task: str, prompt_template: PromptTemplate) -> float:
        emit_message(prompt_template.format(q=task))
        return 1.0

    runner = running(agent)
    rollout = await runner.step("why", resources={"p": PromptTemplate(template="Q={q}", engine="f-string")})
    assert rollout.resources_id is not None
    spans = await store.query_spans(rollout.rollout_id)
    assert spans[0].attributes["agentlightning.message.body"] == "Q=why"


async def test_iter_uses_latest_resources_when_rollout_has_none(running: Any, store: InMemoryLightningStore) -> None:
    seen: list[NamedResources] = []

    class Agent(LitAgent[str]):
        def rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> None:
            seen.append(resources)

    runner = running(Agent())
    await runner.step("no resources at all")
    await store.add_resources({"p": PromptTemplate(template="v1", engine="f-string")})
    await runner.step("latest")
    assert seen[0] == {}
    assert seen[1]["p"].template == "v1"  # type: ignore[union-attr]


class ForgetfulStore(InMemoryLightningStore):
    """A store that lost every resources bundle (as if another process had pruned them)."""

    async def get_resources_by_id(self, resources_id: str) -> Any:
        return None


async def test_unknown_resources_id_fails_the_attempt(tracer: OtelTracer) -> None:
    store = ForgetfulStore()
    runner = limited_runner(tracer, 1)
    with runner.run_context(agent=ReturnAgent(), store=store):
        resources = await store.add_resources({"p": PromptTemplate(template="x", engine="f-string")})
        rollout = await store.enqueue_rollout("t", resources_id=resources.resources_id)
        await runner.iter()
    final = await store.get_rollout_by_id(rollout.rollout_id)
    assert final is not None and final.status == "failed"
    spans = await store.query_spans(rollout.rollout_id)
    assert spans[-1].name == "agentlightning.exception"
    assert resources.resources_id in str(spans[-1].attributes["exception.message"])


# ---- failures ----


async def test_agent_exception_fails_the_attempt_and_is_stored_as_a_span(
    running: Any, store: InMemoryLightningStore
) -> None:
    events: list[Any] = []
    recorder = Recorder(events, store)
    runner = running(FailingAgent(), [recorder])
    with pytest.raises(ValueError, match="cannot handle 'bad'"):
        await runner.step("bad")
    rollouts = await store.query_rollouts()
    assert [r.status for r in rollouts] == ["failed"]
    spans = await store.query_spans(rollouts[0].rollout_id)
    assert [s.name for s in spans] == ["agentlightning.message", "agentlightning.exception"]
    exception_span = spans[-1]
    assert exception_span.attributes["exception.type"] == "ValueError"
    assert exception_span.attributes["exception.message"] == "cannot handle 'bad'"
    assert "in rollout_async" in str(exception_span.attributes["exception.stacktrace"])
    # Trace hooks stay paired even when the agent raises; on_rollout_end sees the exception span.
    assert [name for name, _ in events] == ["on_rollout_start", "on_trace_start", "on_trace_end", "on_rollout_end"]
    assert [s.name for s in recorder.rollout_end_spans] == ["agentlightning.message", "agentlightning.exception"]


async def test_iter_survives_agent_failures(store: InMemoryLightningStore, tracer: OtelTracer) -> None:
    class Flaky(LitAgent[int]):
        async def rollout_async(self, task: int, resources: NamedResources, rollout: Rollout) -> float:
            if task % 2:
                raise RuntimeError(f"odd task {task}")
            return 1.0

    runner = limited_runner(tracer, 4)
    with runner.run_context(agent=Flaky(), store=store):
        ids = [(await store.enqueue_rollout(i)).rollout_id for i in range(4)]
        await runner.iter()
    statuses = [r.status for r in await store.wait_for_rollouts(rollout_ids=ids, timeout=0)]
    assert statuses == ["succeeded", "failed", "succeeded", "failed"]


async def test_hook_exceptions_never_break_the_loop(
    store: InMemoryLightningStore, tracer: OtelTracer, caplog: pytest.LogCaptureFixture
) -> None:
    runner = limited_runner(tracer, 2)
    with runner.run_context(agent=ReturnAgent(0.75), store=store, hooks=[Exploding()]):
        ids = [(await store.enqueue_rollout(f"t{i}")).rollout_id for i in range(2)]
        with caplog.at_level(logging.ERROR):
            await runner.iter()
    finals = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
    assert [r.status for r in finals] == ["succeeded", "succeeded"]
    for hook_name in ("on_rollout_start", "on_trace_start", "on_trace_end", "on_rollout_end"):
        assert f"Exploding.{hook_name} raised" in caplog.text
    spans = await store.query_spans(ids[0])
    assert get_reward_value(spans[-1]) == 0.75


async def test_cancelled_rollout_is_marked_failed(
    running: Any, store: InMemoryLightningStore, runner: LitAgentRunner[Any]
) -> None:
    started = asyncio.Event()

    class Hangs(LitAgent[str]):
        async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> None:
            started.set()
            await asyncio.Event().wait()

    running(Hangs())
    rollout = await store.enqueue_rollout("forever")
    task = asyncio.create_task(runner.iter())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    final = await store.get_rollout_by_id(rollout.rollout_id)
    assert final is not None and final.status == "failed"


# ---- the loop: limits and stopping ----


async def test_max_rollouts_limits_iter(store: InMemoryLightningStore, tracer: OtelTracer) -> None:
    limited = limited_runner(tracer, 2)
    with limited.run_context(agent=ReturnAgent(1.0), store=store):
        ids = [(await store.enqueue_rollout(i)).rollout_id for i in range(3)]
        await limited.iter()
    statuses = [(await store.get_rollout_by_id(i)).status for i in ids]  # type: ignore[union-attr]
    assert statuses == ["succeeded", "succeeded", "queuing"]


async def test_max_rollouts_zero_runs_nothing(store: InMemoryLightningStore, tracer: OtelTracer) -> None:
    limited = limited_runner(tracer, 0)
    with limited.run_context(agent=ReturnAgent(), store=store):
        rollout = await store.enqueue_rollout("t")
        await limited.iter()
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "queuing"  # type: ignore[union-attr]


async def test_iter_stops_promptly_when_event_is_set_while_idle(
    store: InMemoryLightningStore, tracer: OtelTracer
) -> None:
    done = asyncio.Event()

    class Agent(LitAgent[str]):
        async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> None:
            done.set()

    # A poll interval far longer than the wait below: only the 0.1 s stop checks can end the loop in time.
    idle_runner: LitAgentRunner[Any] = LitAgentRunner(tracer, poll_interval=60.0, heartbeat_interval=0)
    stop = threading.Event()
    with idle_runner.run_context(agent=Agent(), store=store):
        await store.enqueue_rollout("only one")
        task = asyncio.create_task(idle_runner.iter(event=stop))
        await done.wait()
        stop.set()
        await asyncio.wait_for(task, timeout=10.0)


async def test_iter_returns_at_once_when_event_already_set(running: Any, store: InMemoryLightningStore) -> None:
    runner = running(ReturnAgent())
    rollout = await store.enqueue_rollout("t")
    stop = threading.Event()
    stop.set()
    await runner.iter(event=stop)
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "queuing"  # type: ignore[union-attr]


# ---- heartbeats ----


class HeartbeatCountingStore(InMemoryLightningStore):
    """An in-memory store that signals (across threads) once it received two worker heartbeats."""

    def __init__(self, thread_safe: bool) -> None:
        super().__init__(thread_safe=thread_safe)
        self.heartbeats: list[str] = []
        self.two_heartbeats = threading.Event()

    async def update_worker(self, worker_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        worker = await super().update_worker(worker_id, heartbeat_stats=heartbeat_stats)
        self.heartbeats.append(worker_id)
        if len(self.heartbeats) >= 2:
            self.two_heartbeats.set()
        return worker


@pytest.mark.parametrize("mode", ["thread", "asyncio"])
@pytest.mark.parametrize("thread_safe", [False, True])
async def test_heartbeats_are_recorded_in_the_store(tracer: OtelTracer, mode: Any, thread_safe: bool) -> None:
    store = HeartbeatCountingStore(thread_safe)

    class WaitsForTwoHeartbeats(LitAgent[str]):
        async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> None:
            assert await asyncio.to_thread(store.two_heartbeats.wait, 30.0), "no second heartbeat within 30 s"

    hb_runner: LitAgentRunner[Any] = LitAgentRunner(
        tracer, max_rollouts=1, heartbeat_interval=0.02, interval_jitter=0.005, heartbeat_launch_mode=mode
    )
    with hb_runner.run_context(agent=WaitsForTwoHeartbeats(), store=store, worker_id=7):
        rollout = await store.enqueue_rollout("t")
        await hb_runner.iter()
        stopped_at = len(store.heartbeats)
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "succeeded"  # type: ignore[union-attr]
    assert set(store.heartbeats) == {"Worker-7"}
    worker = await store.get_worker_by_id("Worker-7")
    assert worker is not None and worker.last_heartbeat_time is not None and worker.heartbeat_stats is not None
    assert {"cpu", "memory", "disk", "network", "process"} <= set(worker.heartbeat_stats)
    assert worker.heartbeat_stats["process"]["pid"] > 0
    # iter() stopped the heartbeats on its way out.
    await asyncio.sleep(0.1)
    assert len(store.heartbeats) == stopped_at


class BeatWaitingStore(InMemoryLightningStore):
    """A store on a fake clock that lets a test wait for the runner's next heartbeat."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock, scan_debounce_seconds=0)
        self.beats = 0
        self._beat = threading.Condition()

    async def update_worker(self, worker_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        worker = await super().update_worker(worker_id, heartbeat_stats=heartbeat_stats)
        with self._beat:
            self.beats += 1
            self._beat.notify_all()
        return worker

    def wait_for_beats(self, count: int) -> bool:
        with self._beat:
            return self._beat.wait_for(lambda: self.beats >= count, timeout=30.0)


async def test_a_silent_agent_stays_responsive_while_its_runner_heartbeats(tracer: OtelTracer) -> None:
    """The runner's worker heartbeat counts for its attempt, so only a dead runner is `unresponsive`."""
    clock = FakeClock()
    store = BeatWaitingStore(clock)

    class SilentAgent(LitAgent[str]):
        """Records nothing for 4 x 8 s of store time, well past unresponsive_seconds=10."""

        async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
            for _ in range(4):
                clock.advance(8)
                assert await asyncio.to_thread(store.wait_for_beats, store.beats + 1), "no heartbeat within 30 s"
            return 1.0

    hb_runner: LitAgentRunner[Any] = LitAgentRunner(tracer, max_rollouts=1, heartbeat_interval=0.02)
    with hb_runner.run_context(agent=SilentAgent(), store=store, worker_id=3):
        rollout = await store.enqueue_rollout("t", config=RolloutConfig(unresponsive_seconds=10))
        await asyncio.wait_for(hb_runner.iter(), timeout=60)
    attempts = await store.query_attempts(rollout.rollout_id)
    assert [a.status for a in attempts] == ["succeeded"]
    assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "succeeded"  # type: ignore[union-attr]


# ---- sync agents ----


@pytest.mark.parametrize("in_thread", [None, True, False])
async def test_sync_agent_spans_are_captured_inline_or_in_a_thread(
    running: Any, store: InMemoryLightningStore, in_thread: Optional[bool]
) -> None:
    threads: list[int] = []

    class SyncAgent(LitAgent[str]):
        def rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
            threads.append(threading.get_ident())
            emit_message(f"sync {task}")
            return 0.5

    runner = running(SyncAgent())
    runner.sync_agent_in_thread = in_thread
    rollout = await runner.step("x")
    spans = await store.query_spans(rollout.rollout_id)
    assert [s.name for s in spans] == ["agentlightning.message", "agentlightning.annotation"]
    assert (threads[0] != threading.get_ident()) == bool(in_thread)


# ---- return values ----


async def test_none_result_takes_spans_from_the_tracer(running: Any, store: InMemoryLightningStore) -> None:
    events: list[Any] = []
    recorder = Recorder(events, store)
    runner = running(ReturnAgent(None), [recorder])
    rollout = await runner.step("t")
    stored = await store.query_spans(rollout.rollout_id)
    assert [s.span_id for s in recorder.rollout_end_spans] == [s.span_id for s in stored]
    assert stored[0].sequence_id == 1


async def test_float_result_becomes_a_reward_span_after_the_traced_spans(
    running: Any, store: InMemoryLightningStore
) -> None:
    runner = running(ReturnAgent(0.25))
    rollout = await runner.step("t")
    spans = await store.query_spans(rollout.rollout_id)
    assert [s.name for s in spans] == ["agentlightning.message", "agentlightning.annotation"]
    assert [s.sequence_id for s in spans] == [1, 2]
    assert get_reward_value(spans[1]) == 0.25


class WriteCountingStore(InMemoryLightningStore):
    """Counts the span writes and sequence-id requests that reach the store."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    async def add_span(self, span: Span) -> Optional[Span]:
        self.calls["add_span"] += 1
        return await super().add_span(span)

    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        self.calls["add_many_spans"] += 1
        return await super().add_many_spans(spans)

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        self.calls["sequence_ids"] += 1
        return await super().get_next_span_sequence_id(rollout_id, attempt_id)

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        self.calls["sequence_ids"] += 1
        return await super().get_many_span_sequence_ids(rollout_attempt_ids)


async def test_a_refused_token_stops_the_runner_with_an_error_naming_the_fix(tracer: OtelTracer) -> None:
    """Not an endless idle loop on an 'empty queue': the 401 surfaces at once and the rollout stays queued."""
    store = InMemoryLightningStore(thread_safe=True)
    server = LightningStoreServer(store, port=0, auth_token="right")
    await server.start()
    client = LightningStoreClient(server.endpoint, auth_token="wrong", retry_budget=30)
    try:
        rollout = await store.enqueue_rollout("t")
        runner: LitAgentRunner[Any] = LitAgentRunner(tracer, poll_interval=0.05, heartbeat_interval=0)
        with runner.run_context(agent=ReturnAgent(1.0), store=client):
            with pytest.raises(PermissionError, match="(?=.*AGL_STORE_TOKEN)(?=.*--auth-token)"):
                await asyncio.wait_for(runner.iter(), timeout=20)
        assert (await store.get_rollout_by_id(rollout.rollout_id)).status == "queuing"  # type: ignore[union-attr]
    finally:
        await client.close()
        await server.stop()


@pytest.fixture
async def served() -> AsyncIterator[tuple[LightningStoreClient, WriteCountingStore]]:
    """A client of a real store server, and the store behind it."""
    store = WriteCountingStore()
    server = LightningStoreServer(store, port=0)
    await server.start()
    client = LightningStoreClient(server.endpoint)
    yield client, store
    await client.close()
    await server.stop()


async def test_returned_reward_travels_with_the_traced_spans_in_one_request(
    tracer: OtelTracer, served: tuple[LightningStoreClient, WriteCountingStore]
) -> None:
    client, store = served
    with LitAgentRunner(tracer, heartbeat_interval=0).run_context(agent=ReturnAgent(0.5), store=client) as runner:
        rollout = await runner.step("t")
    spans = await store.query_spans(rollout.rollout_id)
    assert [(s.name, s.sequence_id) for s in spans] == [("agentlightning.message", 1), ("agentlightning.annotation", 2)]
    assert get_reward_value(spans[1]) == 0.5
    assert store.calls == Counter({"add_many_spans": 1})  # the server allocated the sequence ids itself


def record_requests(client: LightningStoreClient, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The "METHOD /path" of every request `client` sends from now on (ids replaced by `*`)."""
    sent: list[str] = []
    send = client._request

    async def recording(method: str, path: str, *args: Any, **kwargs: Any) -> Optional[bytes]:
        parts = ["*" if part.startswith(("ro-", "at-")) else part for part in path.split("/")]
        sent.append(f"{method} {'/'.join(parts)}")
        return await send(method, path, *args, **kwargs)

    monkeypatch.setattr(client, "_request", recording)
    return sent


async def test_a_rollout_costs_a_dequeue_and_one_request_with_its_spans_and_status(
    tracer: OtelTracer, served: tuple[LightningStoreClient, WriteCountingStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, store = served
    rollout = await store.enqueue_rollout("t")
    sent = record_requests(client, monkeypatch)
    with limited_runner(tracer, 1).run_context(agent=ReturnAgent(0.5), store=client) as runner:
        await runner.iter()
    assert sent == ["POST /queues/rollouts/dequeue", "POST /rollouts/*/attempts/*/finish"]
    spans = await store.query_spans(rollout.rollout_id)
    assert [(s.name, s.sequence_id) for s in spans] == [("agentlightning.message", 1), ("agentlightning.annotation", 2)]
    assert get_reward_value(spans[1]) == 0.5
    final = await store.get_rollout_by_id(rollout.rollout_id)
    assert final is not None and final.status == "succeeded"
    assert [(s.name, s.sequence_id) for s in tracer.get_last_trace()] == [
        ("agentlightning.message", 1),
        ("agentlightning.annotation", 2),
    ]  # the ids the store gave, not provisional ones


async def test_a_failing_agent_over_http_keeps_its_spans_in_order_and_fails(
    tracer: OtelTracer, served: tuple[LightningStoreClient, WriteCountingStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, store = served
    rollout = await store.enqueue_rollout("t")
    sent = record_requests(client, monkeypatch)
    with limited_runner(tracer, 1).run_context(agent=FailingAgent(), store=client) as runner:
        await runner.iter()
    spans = await store.query_spans(rollout.rollout_id)
    assert [s.name for s in spans] == ["agentlightning.message", "agentlightning.exception"]
    assert [s.sequence_id for s in spans] == [1, 2]
    final = await store.get_rollout_by_id(rollout.rollout_id)
    assert final is not None and final.status == "failed"
    # The trace, then the exception span, with the final status: one request after the dequeue.
    assert sent == ["POST /queues/rollouts/dequeue", "POST /rollouts/*/attempts/*/finish"]
    assert [s.name for s in tracer.get_last_trace()] == ["agentlightning.message"]  # the runner's span is apart


async def test_a_bad_result_over_http_fails_with_its_exception_span_after_the_trace(
    tracer: OtelTracer, served: tuple[LightningStoreClient, WriteCountingStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, store = served
    rollout = await store.enqueue_rollout("t")
    sent = record_requests(client, monkeypatch)
    with limited_runner(tracer, 1).run_context(agent=ReturnAgent({"not": "a result"}), store=client) as runner:
        await runner.iter()
    spans = await store.query_spans(rollout.rollout_id)
    assert [(s.name, s.sequence_id) for s in spans] == [("agentlightning.message", 1), ("agentlightning.exception", 2)]
    assert "RolloutRawResult" in str(spans[1].attributes["exception.message"])
    final = await store.get_rollout_by_id(rollout.rollout_id)
    assert final is not None and final.status == "failed"
    assert sent == ["POST /queues/rollouts/dequeue", "POST /rollouts/*/attempts/*/finish"]


async def test_an_on_rollout_end_hook_sees_the_spans_stored_before_the_status(
    tracer: OtelTracer, served: tuple[LightningStoreClient, WriteCountingStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, store = served
    rollout = await store.enqueue_rollout("t")
    recorder = Recorder([], client)
    sent = record_requests(client, monkeypatch)
    runner = limited_runner(tracer, 1)
    with runner.run_context(agent=ReturnAgent(0.5), store=client, hooks=[recorder]):
        await runner.iter()
    assert recorder.status_at_rollout_end == "running"  # spans arrived; the status is not final yet
    assert [(s.name, s.sequence_id) for s in recorder.rollout_end_spans] == [
        ("agentlightning.message", 1),
        ("agentlightning.annotation", 2),
    ]
    assert "POST /spans/many" in sent and sent[-1] == "POST /rollouts/*/attempts/*"
    final = await store.get_rollout_by_id(rollout.rollout_id)
    assert final is not None and final.status == "succeeded"


async def test_in_process_store_takes_the_reward_directly(tracer: OtelTracer) -> None:
    store = WriteCountingStore()
    with LitAgentRunner(tracer, heartbeat_interval=0).run_context(agent=ReturnAgent(0.5), store=store) as runner:
        rollout = await runner.step("t")
    spans = await store.query_spans(rollout.rollout_id)
    assert [(s.name, s.sequence_id) for s in spans] == [("agentlightning.message", 1), ("agentlightning.annotation", 2)]
    assert store.calls == Counter({"add_many_spans": 2})  # the trace, then the reward: no sequence-id requests


class DroppingTracer(OtelTracer):
    """Records nothing through `create_span`, like a tracer whose sampler drops those spans."""

    def create_span(self, name: str, attributes: Any = None, timestamp: Any = None, status: Any = None) -> Any:
        return SpanCoreFields(name=name, attributes=dict(attributes or {}), start_time=1.0, end_time=1.0)


@pytest.mark.parametrize("tracer_cls", [DummyTracer, DroppingTracer])
async def test_reward_is_stored_by_the_runner_when_the_tracer_does_not_deliver_it(
    tracer_cls: type, served: tuple[LightningStoreClient, WriteCountingStore]
) -> None:
    client, store = served
    runner: LitAgentRunner[Any] = LitAgentRunner(tracer_cls(), heartbeat_interval=0)
    with runner.run_context(agent=ReturnAgent(0.5), store=client):
        rollout = await runner.step("t")
    (reward,) = await store.query_spans(rollout.rollout_id)
    assert (reward.name, reward.sequence_id, get_reward_value(reward)) == ("agentlightning.annotation", 1, 0.5)
    assert store.calls == Counter({"add_many_spans": 1})


@pytest.mark.parametrize("value, expected", [(1, 1.0), (True, 1.0), (0, 0.0)])
async def test_int_and_bool_results_are_coerced_with_a_warning(
    running: Any, store: InMemoryLightningStore, caplog: pytest.LogCaptureFixture, value: Any, expected: float
) -> None:
    runner = running(ReturnAgent(value))
    with caplog.at_level(logging.WARNING):
        rollout = await runner.step("t")
    assert f"returned {type(value).__name__} {value!r} as reward" in caplog.text
    spans = await store.query_spans(rollout.rollout_id)
    assert get_reward_value(spans[-1]) == expected


def _otel_spans(names: list[str]) -> list[ReadableSpan]:
    """Finished spans from a private SDK provider that no tracer listens to."""
    provider = TracerProvider()
    otel_tracer = provider.get_tracer("test")
    finished: list[ReadableSpan] = []
    for name in names:
        span = otel_tracer.start_span(name, attributes={"k": name})
        span.end()
        finished.append(span)  # type: ignore[arg-type]
    return finished


async def test_readable_span_list_is_stored(running: Any, store: InMemoryLightningStore) -> None:
    class Agent(LitAgent[str]):
        def rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> list[ReadableSpan]:
            return _otel_spans(["first", "second"])

    rollout = await running(Agent()).step("t")
    spans = await store.query_spans(rollout.rollout_id)
    assert [(s.name, s.attributes["k"]) for s in spans] == [("first", "first"), ("second", "second")]


async def test_span_list_is_tied_to_the_attempt(running: Any, store: InMemoryLightningStore) -> None:
    class Agent(LitAgent[str]):
        def rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> list[Span]:
            return [Span.from_attributes(attributes={"i": i}, name=f"custom-{i}") for i in range(3)]

    rollout = await running(Agent()).step("t")
    spans = await store.query_spans(rollout.rollout_id)
    assert [s.name for s in spans] == ["custom-0", "custom-1", "custom-2"]
    assert [s.sequence_id for s in spans] == [1, 2, 3]
    latest = await store.get_latest_attempt(rollout.rollout_id)
    assert latest is not None and {s.attempt_id for s in spans} == {latest.attempt_id}


async def test_foreign_span_ids_are_reattributed_with_a_warning(
    running: Any, store: InMemoryLightningStore, caplog: pytest.LogCaptureFixture
) -> None:
    class Agent(LitAgent[str]):
        def rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> list[Span]:
            return [Span.from_attributes(rollout_id="ro-other", attempt_id="at-other", sequence_id=5, name="x")]

    with caplog.at_level(logging.WARNING):
        rollout = await running(Agent()).step("t")
    assert "name another rollout/attempt (e.g. ro-other/at-other)" in caplog.text
    spans = await store.query_spans(rollout.rollout_id)
    assert [(s.name, s.sequence_id, s.rollout_id) for s in spans] == [("x", 5, rollout.rollout_id)]


async def test_core_fields_list_gets_sequence_ids_in_bulk(running: Any, store: InMemoryLightningStore) -> None:
    class Agent(LitAgent[str]):
        def rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> list[SpanCoreFields]:
            emit_message("traced first")
            return [
                SpanCoreFields(name="core-a", attributes={"a": 1}, status=TraceStatus(status_code="OK")),
                SpanCoreFields(name="core-b", start_time=10.0, end_time=11.0),
            ]

    rollout = await running(Agent()).step("t")
    spans = await store.query_spans(rollout.rollout_id)
    assert [(s.name, s.sequence_id) for s in spans] == [
        ("agentlightning.message", 1),
        ("core-a", 2),
        ("core-b", 3),
    ]
    assert (spans[2].start_time, spans[2].end_time) == (10.0, 11.0)


async def test_an_empty_span_list_warns_and_keeps_traced_spans(
    running: Any, store: InMemoryLightningStore, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        rollout = await running(ReturnAgent([])).step("t")
    assert "empty span list" in caplog.text
    assert rollout.status == "succeeded"
    spans = await store.query_spans(rollout.rollout_id)
    assert [s.name for s in spans] == ["agentlightning.message"]


@pytest.mark.parametrize(
    "result, message",
    [
        ([SpanCoreFields(name="a"), "not a span"], "list of SpanCoreFields, str"),
        ({"reward": 1.0}, "returned a dict, which is not a RolloutRawResult"),
        ("0.5", "returned a str, which is not a RolloutRawResult"),
    ],
)
async def test_unsupported_results_fail_the_attempt_with_a_type_error(
    running: Any, store: InMemoryLightningStore, result: Any, message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        await running(ReturnAgent(result)).step("t")  # step() re-raises what failed the attempt
    (rollout,) = await store.query_rollouts()
    assert rollout.status == "failed"
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt is not None and attempt.status == "failed"
    spans = await store.query_spans(rollout.rollout_id)
    assert [s.name for s in spans] == ["agentlightning.message", "agentlightning.exception"]
    exception = spans[-1].attributes
    assert exception["exception.type"] == "TypeError" and message in str(exception["exception.message"])


# ---- NaN and infinity (docs/store-guarantees.md) ----


class NonFiniteAttributeAgent(LitAgent[Any]):
    """Records a span whose attributes hold NaN / -inf (as a logprob can be), then returns a finite reward."""

    async def rollout_async(self, task: Any, resources: NamedResources, rollout: Rollout) -> Any:
        tracer = get_active_tracer()
        assert tracer is not None
        tracer.create_span("scores", attributes={"score": float("nan"), "logprob": float("-inf")})
        return 1.0


@pytest.mark.parametrize("reward", [float("nan"), float("inf")])
async def test_a_non_finite_reward_fails_the_attempt_over_http(
    tracer: OtelTracer, served: tuple[LightningStoreClient, WriteCountingStore], reward: float
) -> None:
    """The rollout ends (failed, with the reason stored), instead of staying `preparing` with its spans lost."""
    client, store = served
    with LitAgentRunner(tracer, heartbeat_interval=0).run_context(agent=ReturnAgent(reward), store=client) as runner:
        with pytest.raises(ValueError, match="reward must be a finite number"):  # step() re-raises it
            await asyncio.wait_for(runner.step("t"), timeout=20)
    (rollout,) = await store.query_rollouts()
    assert rollout.status == "failed"
    spans = await store.query_spans(rollout.rollout_id)
    assert [s.name for s in spans] == ["agentlightning.message", "agentlightning.exception"]
    message = str(spans[-1].attributes["exception.message"])
    assert "reward must be a finite number" in message and repr(reward) in message


async def test_non_finite_span_attributes_are_kept_over_http(
    tracer: OtelTracer, served: tuple[LightningStoreClient, WriteCountingStore]
) -> None:
    client, store = served
    agent = NonFiniteAttributeAgent()
    with LitAgentRunner(tracer, heartbeat_interval=0).run_context(agent=agent, store=client) as runner:
        rollout = await asyncio.wait_for(runner.step("t"), timeout=20)
    assert rollout.status == "succeeded"
    spans = await store.query_spans(rollout.rollout_id)
    assert [s.name for s in spans] == ["scores", "agentlightning.annotation"]
    assert spans[0].attributes["score"] == "NaN" and spans[0].attributes["logprob"] == "-Infinity"
    assert get_reward_value(spans[1]) == 1.0
