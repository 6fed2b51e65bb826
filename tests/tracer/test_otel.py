"""OtelTracer: every span finished inside a trace context reaches the store, in order, none lost."""

from __future__ import annotations

import asyncio
import logging
import pickle
import threading
from collections.abc import Sequence

import pytest
from opentelemetry import trace as trace_api

from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.store.transitions import StaleAttemptError
from agentlightning.tracer import DummyTracer, OtelTracer, get_active_tracer
from agentlightning.tracer._delivery import SPAN_BATCH_DELAY_SECONDS
from agentlightning.tracer.otel import DUMMY_ATTEMPT_ID, DUMMY_ROLLOUT_ID
from agentlightning.types import AUTO_SEQUENCE_ID, Span, TraceStatus


async def _rollout(store: InMemoryLightningStore) -> tuple[str, str]:
    attempted = await store.start_rollout(input={"task": 1})
    return attempted.rollout_id, attempted.attempt.attempt_id


def _assert_strictly_increasing(values: list[int]) -> None:
    assert all(a < b for a, b in zip(values, values[1:], strict=False)), values


async def test_spans_reach_the_store_with_ids_and_increasing_sequence(
    tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    rollout_id, attempt_id = await _rollout(store)
    async with tracer.trace_context("rollout", rollout_id=rollout_id, attempt_id=attempt_id):
        tracer.create_span("first", {"k": 1})
        with tracer.operation_context("second", {"k": 2}):
            await asyncio.sleep(0)
        tracer.create_span("third")

    stored = await store.query_spans(rollout_id)
    assert [s.name for s in stored] == ["first", "second", "third"]
    assert {(s.rollout_id, s.attempt_id) for s in stored} == {(rollout_id, attempt_id)}
    _assert_strictly_increasing([s.sequence_id for s in stored])
    assert stored[0].attributes == {"k": 1}
    assert [s.span_id for s in tracer.get_last_trace()] == [s.span_id for s in stored]
    assert [s.sequence_id for s in tracer.get_last_trace()] == [s.sequence_id for s in stored]


@pytest.mark.parametrize("thread_safe", [False, True], ids=["caller-loop", "delivery-thread"])
async def test_no_span_is_lost_when_the_context_exits(thread_safe: bool) -> None:
    store = InMemoryLightningStore(thread_safe=thread_safe)
    tracer = OtelTracer(instrument_openai=False)
    with tracer.lifespan(store):
        rollout_id, attempt_id = await _rollout(store)
        async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
            for i in range(1500):
                tracer.create_span("burst", {"i": i})
                if i % 100 == 0:
                    await asyncio.sleep(0)
        stored = await store.query_spans(rollout_id)
    assert len(stored) == 1500
    assert [s.attributes["i"] for s in stored] == list(range(1500))
    assert [s.sequence_id for s in stored] == list(range(1, 1501))


class SequenceCountingStore(InMemoryLightningStore):
    """Records each span batch written and counts separate sequence-id requests."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[int]] = []
        self.sequence_id_requests = 0

    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        self.batches.append([s.sequence_id for s in spans])
        return await super().add_many_spans(spans)

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        self.sequence_id_requests += 1
        return await super().get_many_span_sequence_ids(rollout_attempt_ids)


async def test_each_batch_is_one_write_and_the_store_numbers_it() -> None:
    store = SequenceCountingStore()
    tracer = OtelTracer(instrument_openai=False)
    with tracer.lifespan(store):
        rollout_id, attempt_id = await _rollout(store)
        async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
            for i in range(5):
                tracer.create_span(f"step-{i}")
        stored = await store.query_spans(rollout_id)
    assert [s.sequence_id for s in stored] == [1, 2, 3, 4, 5]
    assert [s.sequence_id for s in tracer.get_last_trace()] == [1, 2, 3, 4, 5]
    assert store.sequence_id_requests == 0
    assert all(set(batch) == {AUTO_SEQUENCE_ID} for batch in store.batches)  # sent unnumbered: one round trip per batch
    assert sum(len(batch) for batch in store.batches) == 5


class SlowFirstWriteStore(InMemoryLightningStore):
    """Holds its first span write until released, so a context can close while that write is in flight."""

    def __init__(self, thread_safe: bool) -> None:
        super().__init__(thread_safe=thread_safe)
        self.batches: list[list[str]] = []
        self.first_write_started = threading.Event()
        self.release_first_write = threading.Event()

    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        self.batches.append([s.name for s in spans])
        if len(self.batches) == 1:
            self.first_write_started.set()
            assert await asyncio.to_thread(self.release_first_write.wait, 30)
        return await super().add_many_spans(spans)


@pytest.mark.parametrize("thread_safe", [False, True], ids=["caller-loop", "delivery-thread"])
async def test_closing_while_a_batch_is_in_flight_keeps_the_order(thread_safe: bool) -> None:
    store = SlowFirstWriteStore(thread_safe)
    tracer = OtelTracer(instrument_openai=False)
    with tracer.lifespan(store):
        rollout_id, attempt_id = await _rollout(store)
        async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
            tracer.create_span("first")
            assert await asyncio.to_thread(store.first_write_started.wait, 30)  # the batch timer fired
            tracer.create_span("second")
            store.release_first_write.set()
        stored = await store.query_spans(rollout_id)
    assert [(s.name, s.sequence_id) for s in stored] == [("first", 1), ("second", 2)]
    assert store.batches == [["first"], ["second"]]
    assert [(s.name, s.sequence_id) for s in tracer.get_last_trace()] == [("first", 1), ("second", 2)]


@pytest.mark.parametrize("thread_safe", [False, True], ids=["caller-loop", "delivery-thread"])
async def test_a_deferred_last_batch_travels_with_the_final_status(thread_safe: bool) -> None:
    store = SlowFirstWriteStore(thread_safe)
    tracer = OtelTracer(instrument_openai=False)
    with tracer.lifespan(store):
        rollout_id, attempt_id = await _rollout(store)
        async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id, defer_last_batch=True):
            tracer.create_span("first")
            assert await asyncio.to_thread(store.first_write_started.wait, 30)  # the batch timer fired
            tracer.create_span("second")
            store.release_first_write.set()
        # Leaving the context waited for the batch in flight and kept the rest, even past the batch timer.
        await asyncio.sleep(SPAN_BATCH_DELAY_SECONDS * 4)
        assert [s.name for s in await store.query_spans(rollout_id)] == ["first"]
        assert [s.name for s in tracer.get_last_trace()] == ["first", "second"]
        attempt = await store.get_latest_attempt(rollout_id)
        assert attempt is not None and attempt.status == "running"

        finished = await tracer.finish_last_trace("succeeded")
        stored = await store.query_spans(rollout_id)
    assert finished.attempt.status == "succeeded" and [s.name for s in finished.spans] == ["second"]
    assert [(s.name, s.sequence_id) for s in stored] == [("first", 1), ("second", 2)]
    assert store.batches == [["first"], ["second"]]
    assert [(s.name, s.sequence_id) for s in tracer.get_last_trace()] == [("first", 1), ("second", 2)]


async def test_flush_last_trace_writes_a_deferred_batch_without_a_status(
    tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    rollout_id, attempt_id = await _rollout(store)
    async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id, defer_last_batch=True):
        tracer.create_span("only")
    await tracer.flush_last_trace()
    assert [(s.name, s.sequence_id) for s in await store.query_spans(rollout_id)] == [("only", 1)]
    attempt = await store.get_latest_attempt(rollout_id)
    assert attempt is not None and attempt.status == "running"  # the first span's heartbeat, no final status
    finished = await tracer.finish_last_trace("failed")  # nothing left: the status alone
    assert finished.spans == [] and finished.attempt.status == "failed"


async def test_a_refused_final_status_keeps_the_deferred_spans_locally(
    tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    started = await store.start_rollout(input=1)
    await store.start_attempt(started.rollout_id)  # supersedes the attempt being traced
    async with tracer.trace_context(
        rollout_id=started.rollout_id, attempt_id=started.attempt.attempt_id, defer_last_batch=True
    ):
        tracer.create_span("late")
    with pytest.raises(StaleAttemptError):
        await tracer.finish_last_trace("succeeded")
    assert [s.name for s in tracer.get_last_trace()] == ["late"]
    assert [s.name for s in await store.query_spans(started.rollout_id)] == ["late"]  # stored, marked stale


async def test_blocking_sync_code_inside_the_context_is_delivered(
    tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    rollout_id, attempt_id = await _rollout(store)

    def sync_agent() -> None:
        otel = trace_api.get_tracer("sync-agent")
        for i in range(50):
            with otel.start_as_current_span(f"step-{i}"):
                pass

    async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
        sync_agent()  # blocks the event loop for the whole run
    stored = await store.query_spans(rollout_id)
    assert [s.name for s in stored] == [f"step-{i}" for i in range(50)]


async def test_spans_from_a_thread_without_context_fall_back_to_the_open_session(
    tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    rollout_id, attempt_id = await _rollout(store)
    async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
        worker = threading.Thread(target=lambda: tracer.create_span("from-thread"))
        worker.start()
        await asyncio.to_thread(worker.join)
        await asyncio.to_thread(tracer.create_span, "from-to-thread")
    stored = await store.query_spans(rollout_id)
    assert sorted(s.name for s in stored) == ["from-thread", "from-to-thread"]


async def test_concurrent_contexts_keep_their_spans_apart(tracer: OtelTracer, store: InMemoryLightningStore) -> None:
    first, second = await _rollout(store), await _rollout(store)

    async def run(ids: tuple[str, str], label: str) -> None:
        async with tracer.trace_context(rollout_id=ids[0], attempt_id=ids[1]):
            for i in range(20):
                tracer.create_span(f"{label}-{i}")
                await asyncio.sleep(0)

    await asyncio.gather(run(first, "a"), run(second, "b"))
    spans_a = await store.query_spans(first[0])
    spans_b = await store.query_spans(second[0])
    assert [s.name for s in spans_a] == [f"a-{i}" for i in range(20)]
    assert [s.name for s in spans_b] == [f"b-{i}" for i in range(20)]
    assert get_active_tracer() is None


async def test_nested_operation_spans_keep_their_parent(tracer: OtelTracer, store: InMemoryLightningStore) -> None:
    rollout_id, attempt_id = await _rollout(store)
    async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
        with tracer.operation_context("outer") as outer:
            outer.record_attributes({"level": "outer", "payload": {"nested": True}})  # type: ignore[dict-item]
            tracer.create_span("inner")
    by_name = {s.name: s for s in await store.query_spans(rollout_id)}
    assert by_name["inner"].parent_id == by_name["outer"].span_id
    assert by_name["outer"].attributes == {"level": "outer", "payload": '{"nested": true}'}


async def test_operation_context_records_exceptions(tracer: OtelTracer, store: InMemoryLightningStore) -> None:
    rollout_id, attempt_id = await _rollout(store)
    async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
        with pytest.raises(KeyError):
            with tracer.operation_context("failing") as ctx:
                raise KeyError("missing")
    recorded = ctx.get_recorded_span()
    assert recorded.status.status_code == "ERROR"
    assert recorded.attributes["exception.type"] == "KeyError"
    (stored,) = await store.query_spans(rollout_id)
    assert stored.status.status_code == "ERROR"
    assert stored.attributes["exception.type"] == "KeyError"
    assert stored.end_time is not None and stored.start_time is not None


async def test_create_span_returns_core_fields_and_honours_timestamp_and_status(
    tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    rollout_id, attempt_id = await _rollout(store)
    async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
        core = tracer.create_span(
            "instant", {"x": [1, 2]}, timestamp=1700000000.5, status=TraceStatus(status_code="OK")
        )
    assert core.start_time == core.end_time == 1700000000.5
    assert core.status.status_code == "OK"
    (stored,) = await store.query_spans(rollout_id)
    assert stored.start_time == pytest.approx(1700000000.5)
    assert stored.end_time == pytest.approx(1700000000.5)
    assert stored.status.status_code == "OK"
    assert stored.attributes == {"x": [1, 2]}


async def test_without_ids_spans_are_buffered_locally_with_dummy_ids(
    tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    async with tracer.trace_context("local"):
        tracer.create_span("a")
        tracer.create_span("b")
    spans = tracer.get_last_trace()
    assert [(s.name, s.rollout_id, s.attempt_id, s.sequence_id) for s in spans] == [
        ("a", DUMMY_ROLLOUT_ID, DUMMY_ATTEMPT_ID, 1),
        ("b", DUMMY_ROLLOUT_ID, DUMMY_ATTEMPT_ID, 2),
    ]
    assert (await store.statistics()).get("total_spans") == 0


async def test_ids_must_come_together_and_need_a_store() -> None:
    tracer = OtelTracer(instrument_openai=False)
    with pytest.raises(ValueError, match="together"):
        async with tracer.trace_context(rollout_id="ro-1"):
            pass
    with pytest.raises(ValueError, match="together"):
        async with tracer.trace_context(attempt_id="at-1"):
            pass
    with pytest.raises(ValueError, match="needs a store"):
        async with tracer.trace_context(rollout_id="ro-1", attempt_id="at-1"):
            pass
    tracer.teardown_worker(0)


async def test_deprecated_store_argument_still_works(store: InMemoryLightningStore) -> None:
    tracer = OtelTracer(instrument_openai=False)
    rollout_id, attempt_id = await _rollout(store)
    with pytest.warns(DeprecationWarning):
        async with tracer.trace_context(store=store, rollout_id=rollout_id, attempt_id=attempt_id):
            tracer.create_span("x")
    tracer.teardown_worker(0)
    assert [s.name for s in await store.query_spans(rollout_id)] == ["x"]


async def test_tracer_is_active_only_inside_the_context(tracer: OtelTracer) -> None:
    assert get_active_tracer() is None
    async with tracer.trace_context():
        assert get_active_tracer() is tracer
    assert get_active_tracer() is None


async def test_spans_outside_any_context_are_ignored(tracer: OtelTracer, store: InMemoryLightningStore) -> None:
    rollout_id, attempt_id = await _rollout(store)
    tracer.create_span("before")
    async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
        tracer.create_span("during")
    tracer.create_span("after")
    assert [s.name for s in await store.query_spans(rollout_id)] == ["during"]


async def test_store_failures_keep_spans_locally_and_warn(tracer: OtelTracer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentlightning.tracer._delivery")
    async with tracer.trace_context(rollout_id="ro-unknown", attempt_id="at-unknown"):
        tracer.create_span("orphan")
    assert [s.name for s in tracer.get_last_trace()] == ["orphan"]
    assert "ro-unknown" in caplog.text


async def test_get_last_trace_inside_the_context_includes_pending_spans(
    tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    rollout_id, attempt_id = await _rollout(store)
    async with tracer.trace_context(rollout_id=rollout_id, attempt_id=attempt_id):
        tracer.create_span("one")
        tracer.create_span("two")
        # Nothing awaited yet: the spans are still pending delivery.
        assert [(s.name, s.sequence_id) for s in tracer.get_last_trace()] == [("one", 1), ("two", 2)]
    assert [(s.name, s.sequence_id) for s in tracer.get_last_trace()] == [("one", 1), ("two", 2)]


async def test_tracer_pickles_before_and_after_setup(store: InMemoryLightningStore) -> None:
    tracer = OtelTracer(instrument_openai=False)
    clone = pickle.loads(pickle.dumps(tracer))
    tracer.init_worker(0, store)
    clone_after = pickle.loads(pickle.dumps(tracer))
    tracer.teardown_worker(0)
    assert isinstance(clone, OtelTracer) and clone_after.span_processor is None
    assert clone_after.instrument_openai is False


async def test_teardown_detaches_the_processor(store: InMemoryLightningStore) -> None:
    tracer = OtelTracer(instrument_openai=False)
    tracer.init_worker(0, store)
    provider, processor = tracer.tracer_provider, tracer.span_processor
    assert provider is not None and processor is not None
    tracer.teardown_worker(0)
    assert processor not in provider._active_span_processor._span_processors  # type: ignore[attr-defined]


async def test_dummy_tracer_builds_core_fields_and_records_them_locally() -> None:
    tracer = DummyTracer()
    async with tracer.trace_context(rollout_id="ro-x", attempt_id="at-x"):
        assert get_active_tracer() is tracer
        core = tracer.create_span("instant", {"a": 1})
        with tracer.operation_context("op", {"b": 2}) as op:
            op.record_attributes({"c": 3})
    assert get_active_tracer() is None
    assert core.name == "instant" and core.attributes == {"a": 1}
    assert op.get_recorded_span().attributes == {"b": 2, "c": 3}
    spans = tracer.get_last_trace()
    assert [(s.name, s.rollout_id, s.sequence_id) for s in spans] == [("instant", "ro-x", 1), ("op", "ro-x", 2)]


def test_deprecated_trace_run_traces_a_sync_function() -> None:
    tracer = OtelTracer(instrument_openai=False)

    def work(x: int) -> int:
        tracer.create_span("work")
        return x * 2

    with pytest.warns(DeprecationWarning):
        assert tracer.trace_run(work, 21) == 42
    assert [s.name for s in tracer.get_last_trace()] == ["work"]
    tracer.teardown_worker(0)


async def test_deprecated_trace_run_async_and_trace_run_inside_a_loop() -> None:
    tracer = OtelTracer(instrument_openai=False)

    async def work() -> str:
        tracer.create_span("async-work")
        return "done"

    with pytest.warns(DeprecationWarning):
        assert await tracer.trace_run_async(work) == "done"
    assert [s.name for s in tracer.get_last_trace()] == ["async-work"]
    with pytest.warns(DeprecationWarning), pytest.raises(RuntimeError, match="trace_run_async"):
        tracer.trace_run(lambda: None)
    tracer.teardown_worker(0)
