"""Conformance: behaviours v0.3 users rely on (issue #12 item 3), on every backend including HTTP."""

from __future__ import annotations

from collections.abc import Sequence

from agentlightning.store import LightningStore
from agentlightning.types import AUTO_SEQUENCE_ID, PaginatedResult

from .backends import Backend
from .factories import finished_otel_span, make_span, span_of


async def test_limit_zero_returns_an_empty_page_with_the_total(store: LightningStore) -> None:
    first = await store.start_rollout(input=1)
    await store.start_rollout(input=2)
    await store.add_span(span_of(first, 1))
    await store.add_resources({})
    await store.update_worker("w-1")

    rollouts = await store.query_rollouts(limit=0)
    attempts = await store.query_attempts(first.rollout_id, limit=0)
    spans = await store.query_spans(first.rollout_id, limit=0)
    resources = await store.query_resources(limit=0)
    workers = await store.query_workers(limit=0)

    for page, total in ((rollouts, 2), (attempts, 1), (spans, 1), (resources, 1), (workers, 1)):
        assert list(page) == [] and page.limit == 0 and page.total == total


async def test_paginated_result_is_a_sequence(store: LightningStore) -> None:
    await store.enqueue_rollout(input="a")
    await store.enqueue_rollout(input="b")
    page = await store.query_rollouts(sort_by="rollout_id")
    assert isinstance(page, PaginatedResult) and isinstance(page, Sequence)
    assert len(page) == 2 and page[0].rollout_id < page[-1].rollout_id
    assert [r.rollout_id for r in page[0:2]] == [r.rollout_id for r in page]
    assert page.index(page[1]) == 1 and page.count(page[0]) == 1 and page[0] in page
    assert [r.rollout_id for r in reversed(page)] == [page[1].rollout_id, page[0].rollout_id]


async def test_in_filters_win_over_the_legacy_arguments(store: LightningStore) -> None:
    queued = await store.enqueue_rollout(input="q")
    started = await store.start_rollout(input="s")

    by_status = await store.query_rollouts(status_in=["queuing"], status=["preparing"])
    assert [r.rollout_id for r in by_status] == [queued.rollout_id]
    by_id = await store.query_rollouts(rollout_id_in=[started.rollout_id], rollout_ids=[queued.rollout_id])
    assert [r.rollout_id for r in by_id] == [started.rollout_id]
    # The legacy arguments alone still filter.
    assert [r.rollout_id for r in await store.query_rollouts(status=["queuing"])] == [queued.rollout_id]
    assert [r.rollout_id for r in await store.query_rollouts(rollout_ids=[started.rollout_id])] == [started.rollout_id]


async def test_a_worker_going_idle_clears_its_current_rollout(store: LightningStore) -> None:
    await store.enqueue_rollout(input=1)
    claimed = await store.dequeue_rollout(worker_id="w-1")
    assert claimed is not None
    busy = await store.get_worker_by_id("w-1")
    assert busy is not None and busy.current_rollout_id == claimed.rollout_id

    await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")

    idle = await store.get_worker_by_id("w-1")
    assert idle is not None and idle.status == "idle"
    assert idle.current_rollout_id is None and idle.current_attempt_id is None


async def test_adding_the_same_span_twice_returns_none_and_keeps_one(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    span = span_of(started, 1, span_id="00000000000000aa")
    assert await store.add_span(span) is not None
    assert await store.add_span(span) is None
    spans = await store.query_spans(started.rollout_id)
    assert [s.span_id for s in spans] == ["00000000000000aa"]


async def test_sequence_ids_continue_after_an_explicit_add_span(store: LightningStore, backend: Backend) -> None:
    started = await store.start_rollout(input=1)
    await store.add_span(make_span(started.rollout_id, started.attempt.attempt_id, 7))
    assert await store.get_next_span_sequence_id(started.rollout_id, started.attempt.attempt_id) == 8
    assert await store.get_next_span_sequence_id(started.rollout_id, started.attempt.attempt_id) == 9


async def test_an_explicit_sequence_id_zero_is_stored_as_zero(store: LightningStore) -> None:
    """As v0.3: 0 is a real id (stored as given), and the rollout's next id is 1."""
    started = await store.start_rollout(input=1)
    rollout_id, attempt_id = started.rollout_id, started.attempt.attempt_id
    stored = await store.add_span(span_of(started, 0, name="zero"))
    assert stored is not None and stored.sequence_id == 0
    assert await store.get_next_span_sequence_id(rollout_id, attempt_id) == 1
    (batched,) = await store.add_many_spans([span_of(started, 0, name="zero-batched")])
    assert batched.sequence_id == 0
    assert await store.get_next_span_sequence_id(rollout_id, attempt_id) == 2
    spans = await store.query_spans(rollout_id)
    assert [(s.name, s.sequence_id) for s in spans] == [("zero", 0), ("zero-batched", 0)]


async def test_an_explicit_sequence_id_zero_leaves_a_higher_counter_alone(store: LightningStore) -> None:
    """As v0.3: the counter is raised to the highest id seen (0 never lowers it); otel spans the same."""
    started = await store.start_rollout(input=1)
    rollout_id, attempt_id = started.rollout_id, started.attempt.attempt_id
    assert await store.get_many_span_sequence_ids([(rollout_id, attempt_id)] * 5) == [1, 2, 3, 4, 5]
    otel = await store.add_otel_span(rollout_id, attempt_id, finished_otel_span("llm"), sequence_id=0)
    assert otel is not None and otel.sequence_id == 0
    assert await store.get_next_span_sequence_id(rollout_id, attempt_id) == 6
    numbered = await store.add_span(span_of(started, AUTO_SEQUENCE_ID, name="auto"))
    assert numbered is not None and numbered.sequence_id == 7
