"""Conformance: spans, their sequence ids, and spans as attempt heartbeats, on every backend."""

from __future__ import annotations

import pytest

from agentlightning.semconv import AGL_STALE_ATTEMPT
from agentlightning.store import LightningStore
from agentlightning.store.transitions import StaleAttemptError
from agentlightning.types import AUTO_SEQUENCE_ID as AUTO
from agentlightning.types import RolloutConfig

from .backends import Backend, FakeClock
from .factories import finished_otel_span, make_span, span_of, stats_of

# ---- validation ----


async def test_span_for_unknown_rollout_or_attempt_is_rejected(store: LightningStore, backend: Backend) -> None:
    started = await store.start_rollout(input=1)
    with pytest.raises(backend.errors, match="ro-000000000000"):
        await store.add_span(make_span("ro-000000000000", started.attempt.attempt_id, 1))
    with pytest.raises(backend.errors, match="at-00000000"):
        await store.add_span(make_span(started.rollout_id, "at-00000000", 1))
    other = await store.start_rollout(input=2)
    with pytest.raises(backend.errors, match=other.attempt.attempt_id):
        await store.add_span(make_span(started.rollout_id, other.attempt.attempt_id, 1))
    assert (await store.query_spans(started.rollout_id)).total == 0


async def test_a_bad_span_in_a_batch_writes_nothing(store: LightningStore, backend: Backend) -> None:
    started = await store.start_rollout(input=1)
    batch = [span_of(started, 1), make_span(started.rollout_id, "at-00000000", 2)]
    with pytest.raises(backend.errors, match="at-00000000"):
        await store.add_many_spans(batch)
    assert (await store.query_spans(started.rollout_id)).total == 0
    attempt = await store.get_latest_attempt(started.rollout_id)
    assert attempt is not None and attempt.status == "preparing"


# ---- spans drive attempt and rollout status ----


async def test_first_span_moves_attempt_and_rollout_to_running(store: LightningStore, clock: FakeClock) -> None:
    await store.enqueue_rollout(input=1)
    claimed = await store.dequeue_rollout()
    assert claimed is not None
    clock.advance(2)
    stored = await store.add_span(span_of(claimed, 1))
    assert stored is not None and stored.span_id
    attempt = await store.get_latest_attempt(claimed.rollout_id)
    assert attempt is not None
    assert attempt.status == "running"
    assert attempt.last_heartbeat_time == clock.now
    rollout = await store.get_rollout_by_id(claimed.rollout_id)
    assert rollout is not None and rollout.status == "running"


async def test_every_span_is_a_heartbeat(store: LightningStore, clock: FakeClock) -> None:
    started = await store.start_rollout(input=1)
    await store.add_span(span_of(started, 1))
    clock.advance(7)
    await store.add_span(span_of(started, 2))
    attempt = await store.get_latest_attempt(started.rollout_id)
    assert attempt is not None and attempt.last_heartbeat_time == clock.now and attempt.status == "running"


async def test_span_revives_an_unresponsive_attempt_as_in_v03(store: LightningStore) -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["unresponsive"])
    await store.enqueue_rollout(input=1, config=config)
    claimed = await store.dequeue_rollout(worker_id="w-1")
    assert claimed is not None
    await store.update_attempt(claimed.rollout_id, "latest", status="unresponsive")
    await store.add_span(span_of(claimed, 1))
    attempt = await store.get_latest_attempt(claimed.rollout_id)
    assert attempt is not None and attempt.status == "running"
    rollout = await store.get_rollout_by_id(claimed.rollout_id)
    assert rollout is not None and rollout.status == "running"
    worker = await store.get_worker_by_id("w-1")
    assert worker is not None and worker.status == "busy"
    # It left the queue: no retry runs beside the revived attempt.
    assert await store.dequeue_rollout() is None


async def test_span_of_an_old_attempt_does_not_move_the_rollout(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    await store.start_attempt(started.rollout_id)
    await store.add_span(span_of(started, 1))
    attempts = await store.query_attempts(started.rollout_id)
    assert [a.status for a in attempts] == ["preparing", "preparing"]
    rollout = await store.get_rollout_by_id(started.rollout_id)
    assert rollout is not None and rollout.status == "preparing"


async def test_span_does_not_reopen_a_finished_attempt(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    await store.update_attempt(started.rollout_id, "latest", status="succeeded")
    await store.add_span(span_of(started, 1))
    attempt = await store.get_latest_attempt(started.rollout_id)
    assert attempt is not None and attempt.status == "succeeded"
    rollout = await store.get_rollout_by_id(started.rollout_id)
    assert rollout is not None and rollout.status == "succeeded"
    assert (await store.query_spans(started.rollout_id)).total == 1


# ---- sequence ids ----


async def test_sequence_ids_increase_per_rollout(store: LightningStore) -> None:
    a = await store.start_rollout(input="a")
    b = await store.start_rollout(input="b")
    assert [await store.get_next_span_sequence_id(a.rollout_id, a.attempt.attempt_id) for _ in range(3)] == [1, 2, 3]
    assert await store.get_next_span_sequence_id(b.rollout_id, b.attempt.attempt_id) == 1
    retry = await store.start_attempt(a.rollout_id)
    assert await store.get_next_span_sequence_id(a.rollout_id, retry.attempt.attempt_id) == 4


async def test_explicit_sequence_ids_raise_the_floor(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    await store.add_span(span_of(started, 10))
    assert await store.get_next_span_sequence_id(started.rollout_id, started.attempt.attempt_id) == 11
    await store.add_span(span_of(started, 3))
    assert await store.get_next_span_sequence_id(started.rollout_id, started.attempt.attempt_id) == 12


async def test_many_sequence_ids_at_once(store: LightningStore) -> None:
    a = await store.start_rollout(input="a")
    b = await store.start_rollout(input="b")
    ids = await store.get_many_span_sequence_ids(
        [
            (a.rollout_id, a.attempt.attempt_id),
            (b.rollout_id, b.attempt.attempt_id),
            (a.rollout_id, a.attempt.attempt_id),
        ]
    )
    assert ids == [1, 1, 2]


async def test_spans_without_sequence_id_get_the_next_ones_in_batch_order(store: LightningStore) -> None:
    a = await store.start_rollout(input="a")
    b = await store.start_rollout(input="b")
    await store.add_span(span_of(a, 4, name="explicit"))
    batch = [
        span_of(a, AUTO, name="a1"),
        span_of(b, AUTO, name="b1"),
        span_of(a, AUTO, name="a2"),
        span_of(b, 9, name="b9"),
    ]
    stored = await store.add_many_spans(batch)
    assert [(s.name, s.sequence_id) for s in stored] == [("a1", 5), ("b1", 10), ("a2", 6), ("b9", 9)]
    assert [s.sequence_id for s in batch] == [AUTO, AUTO, AUTO, 9]  # the caller's spans are not modified
    single = await store.add_span(span_of(a, AUTO, name="a3"))
    assert single is not None and single.sequence_id == 7
    assert await store.get_next_span_sequence_id(a.rollout_id, a.attempt.attempt_id) == 8
    spans = await store.query_spans(a.rollout_id)
    assert [(s.name, s.sequence_id) for s in spans] == [("explicit", 4), ("a1", 5), ("a2", 6), ("a3", 7)]


async def test_add_otel_span_allocates_a_sequence_id(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    await store.add_span(span_of(started, 1))
    stored = await store.add_otel_span(started.rollout_id, started.attempt.attempt_id, finished_otel_span("llm"))
    assert stored is not None
    assert stored.sequence_id == 2
    assert stored.name == "llm"
    assert stored.attributes == {"answer": 42}
    explicit = await store.add_otel_span(
        started.rollout_id, started.attempt.attempt_id, finished_otel_span("tool"), sequence_id=7
    )
    assert explicit is not None and explicit.sequence_id == 7
    spans = await store.query_spans(started.rollout_id)
    assert [s.name for s in spans] == ["step", "llm", "tool"]


# ---- query_spans ----


async def test_query_spans_by_attempt(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    await store.add_many_spans([span_of(started, 1), span_of(started, 2)])
    retry = await store.start_attempt(started.rollout_id)
    await store.add_span(span_of(retry, 3))
    everything = await store.query_spans(started.rollout_id)
    assert [s.sequence_id for s in everything] == [1, 2, 3]
    first = await store.query_spans(started.rollout_id, started.attempt.attempt_id)
    assert [s.sequence_id for s in first] == [1, 2]
    latest = await store.query_spans(started.rollout_id, "latest")
    assert [s.sequence_id for s in latest] == [3]
    assert all(s.attempt_id == retry.attempt.attempt_id for s in latest)
    assert (await store.query_spans("ro-000000000000")).total == 0
    queued = await store.enqueue_rollout(input=2)
    assert (await store.query_spans(queued.rollout_id, "latest")).total == 0


async def test_query_spans_filters(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    root = span_of(started, 1, name="agent.run", span_id="aaaa000000000001", trace_id="1" * 32)
    child = span_of(
        started, 2, name="openai.chat", span_id="bbbb000000000002", trace_id="1" * 32, parent_id=root.span_id
    )
    other = span_of(started, 3, name="agentlightning.reward", span_id="cccc000000000003", trace_id="2" * 32)
    await store.add_many_spans([root, child, other])

    async def names(**kwargs: object) -> list[str]:
        return [s.name for s in await store.query_spans(started.rollout_id, **kwargs)]  # type: ignore[arg-type]

    assert await names(name="openai.chat") == ["openai.chat"]
    assert await names(name_contains="agent") == ["agent.run", "agentlightning.reward"]
    assert await names(trace_id="1" * 32) == ["agent.run", "openai.chat"]
    assert await names(trace_id_contains="22") == ["agentlightning.reward"]
    assert await names(span_id="cccc000000000003") == ["agentlightning.reward"]
    assert await names(span_id_contains="bbbb") == ["openai.chat"]
    assert await names(parent_id=root.span_id) == ["openai.chat"]
    assert await names(parent_id_contains="aaaa") == ["openai.chat"]
    assert await names(name="agent.run", trace_id="1" * 32) == ["agent.run"]
    assert await names(name="agent.run", trace_id="2" * 32) == []
    assert await names(name="agent.run", trace_id="2" * 32, filter_logic="or") == ["agent.run", "agentlightning.reward"]


async def test_query_spans_sorts_and_paginates(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    await store.add_many_spans(
        [span_of(started, 2, name="b"), span_of(started, 1, name="c"), span_of(started, 3, name="a")]
    )
    default = await store.query_spans(started.rollout_id)
    assert [s.sequence_id for s in default] == [1, 2, 3]
    desc = await store.query_spans(started.rollout_id, sort_order="desc")
    assert [s.sequence_id for s in desc] == [3, 2, 1]
    by_name = await store.query_spans(started.rollout_id, sort_by="name")
    assert [s.name for s in by_name] == ["a", "b", "c"]
    unsorted = await store.query_spans(started.rollout_id, sort_by=None)
    assert [s.name for s in unsorted] == ["b", "c", "a"]
    page = await store.query_spans(started.rollout_id, limit=1, offset=1)
    assert [s.sequence_id for s in page] == [2]
    assert page.total == 3 and page.limit == 1 and page.offset == 1


async def test_spans_round_trip(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    span = span_of(started, 1, attributes={"s": "x", "i": 3, "f": 0.5, "b": True, "l": ["a", "b"]}, start_time=12.5)
    await store.add_span(span)
    (stored,) = await store.query_spans(started.rollout_id)
    assert stored.model_dump() == span.model_dump()


async def test_re_adding_a_span_keeps_the_first(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    span = span_of(started, 1, name="first")
    await store.add_span(span)
    assert await store.add_span(span.model_copy(update={"name": "second"})) is None
    stored = await store.add_many_spans([span.model_copy(update={"name": "third"}), span_of(started, 2)])
    assert [s.sequence_id for s in stored] == [2]
    spans = await store.query_spans(started.rollout_id)
    assert [s.name for s in spans] == ["first", "step"]
    assert (await stats_of(store))["total_spans"] == 2


# ---- finish_attempt: the last spans and the final status in one call ----


async def test_finish_attempt_stores_the_spans_then_the_status(store: LightningStore) -> None:
    await store.enqueue_rollout(input=1)
    claimed = await store.dequeue_rollout()
    assert claimed is not None
    await store.add_span(span_of(claimed, 1, name="first"))
    finished = await store.finish_attempt(
        claimed.rollout_id,
        claimed.attempt.attempt_id,
        "succeeded",
        [span_of(claimed, AUTO, name="last-a"), span_of(claimed, AUTO, name="last-b")],
    )
    assert finished.attempt.status == "succeeded" and finished.attempt.end_time is not None
    assert [(s.name, s.sequence_id) for s in finished.spans] == [("last-a", 2), ("last-b", 3)]
    stored = await store.query_spans(claimed.rollout_id)
    assert [s.name for s in stored] == ["first", "last-a", "last-b"]
    rollout = await store.get_rollout_by_id(claimed.rollout_id)
    assert rollout is not None and rollout.status == "succeeded"


async def test_finish_attempt_without_spans_only_sets_the_status(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    finished = await store.finish_attempt(started.rollout_id, started.attempt.attempt_id, "failed")
    assert finished.spans == [] and finished.attempt.status == "failed"
    assert (await store.query_spans(started.rollout_id)).total == 0


async def test_finish_attempt_refuses_a_span_of_another_attempt_and_changes_nothing(
    store: LightningStore, backend: Backend
) -> None:
    started = await store.start_rollout(input=1)
    other = await store.start_rollout(input=2)
    with pytest.raises(backend.errors, match=other.attempt.attempt_id):
        await store.finish_attempt(started.rollout_id, started.attempt.attempt_id, "succeeded", [span_of(other, AUTO)])
    assert (await store.query_spans(other.rollout_id)).total == 0
    attempt = await store.get_latest_attempt(started.rollout_id)
    assert attempt is not None and attempt.status == "preparing"


async def test_finish_attempt_keeps_the_spans_of_a_superseded_attempt_and_refuses_its_status(
    store: LightningStore,
) -> None:
    started = await store.start_rollout(input=1)
    await store.start_attempt(started.rollout_id)
    with pytest.raises(StaleAttemptError, match="newer attempt"):
        await store.finish_attempt(
            started.rollout_id, started.attempt.attempt_id, "succeeded", [span_of(started, AUTO)]
        )
    (late,) = (await store.query_spans(started.rollout_id)).items
    assert late.attributes.get(AGL_STALE_ATTEMPT) is True
    assert [a.status for a in await store.query_attempts(started.rollout_id)] == ["preparing", "preparing"]
