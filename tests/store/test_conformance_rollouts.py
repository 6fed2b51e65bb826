"""Conformance: rollouts, the queue and attempts, on every registered backend."""

from __future__ import annotations

import asyncio
import re

import pytest

from agentlightning.store import LightningStore
from agentlightning.types import AttemptedRollout, EnqueueRolloutRequest, PromptTemplate, Rollout, RolloutConfig

from .backends import TRAIT_BLOCKING_WAIT, FakeClock
from .factories import span_of, stats_of

RETRY_ON_FAILURE = RolloutConfig(max_attempts=3, retry_condition=["failed", "timeout", "unresponsive"])


async def drain(store: LightningStore, worker_id: str | None = None) -> list[AttemptedRollout]:
    claimed: list[AttemptedRollout] = []
    while (rollout := await store.dequeue_rollout(worker_id=worker_id)) is not None:
        claimed.append(rollout)
    return claimed


# ---- enqueue / dequeue ----


async def test_enqueue_creates_a_queuing_rollout(store: LightningStore, clock: FakeClock) -> None:
    rollout = await store.enqueue_rollout(input={"q": "2+2"}, mode="train", metadata={"tag": "a"})
    assert re.fullmatch(r"ro-[0-9a-f]{12}", rollout.rollout_id)
    assert rollout.status == "queuing"
    assert rollout.input == {"q": "2+2"}
    assert rollout.mode == "train"
    assert rollout.start_time == clock.now
    assert rollout.end_time is None
    assert rollout.config == RolloutConfig()
    assert rollout.metadata == {"tag": "a"}
    assert not isinstance(rollout, AttemptedRollout)
    assert await store.get_rollout_by_id(rollout.rollout_id) == rollout


async def test_enqueue_copies_config_and_metadata(store: LightningStore) -> None:
    config = RolloutConfig(max_attempts=2)
    metadata = {"nested": {"k": 1}}
    rollout = await store.enqueue_rollout(input=1, config=config, metadata=metadata)
    config.max_attempts = 5
    metadata["nested"]["k"] = 2
    stored = await store.get_rollout_by_id(rollout.rollout_id)
    assert stored is not None
    assert stored.config.max_attempts == 2
    assert stored.metadata == {"nested": {"k": 1}}


async def test_dequeue_is_fifo(store: LightningStore) -> None:
    enqueued = [await store.enqueue_rollout(input=i) for i in range(5)]
    claimed = await drain(store)
    assert [r.rollout_id for r in claimed] == [r.rollout_id for r in enqueued]
    assert [r.input for r in claimed] == [0, 1, 2, 3, 4]


async def test_dequeue_on_empty_queue_returns_none(store: LightningStore) -> None:
    assert await store.dequeue_rollout() is None
    assert await store.dequeue_many_rollouts(limit=3) == []


async def test_dequeue_creates_first_attempt(store: LightningStore, clock: FakeClock) -> None:
    rollout = await store.enqueue_rollout(input="x")
    clock.advance(3)
    claimed = await store.dequeue_rollout(worker_id="w-1")
    assert isinstance(claimed, AttemptedRollout)
    assert claimed.rollout_id == rollout.rollout_id
    assert claimed.status == "preparing"
    assert claimed.start_time == rollout.start_time
    attempt = claimed.attempt
    assert re.fullmatch(r"at-[0-9a-f]{8}", attempt.attempt_id)
    assert attempt.rollout_id == rollout.rollout_id
    assert attempt.sequence_id == 1
    assert attempt.status == "preparing"
    assert attempt.start_time == clock.now
    assert attempt.end_time is None
    assert attempt.worker_id == "w-1"
    assert await store.get_latest_attempt(rollout.rollout_id) == attempt
    assert await store.get_rollout_by_id(rollout.rollout_id) == claimed


async def test_enqueue_many_and_dequeue_many_keep_order(store: LightningStore) -> None:
    requests = [
        EnqueueRolloutRequest(input=i, mode="val", config=RolloutConfig(max_attempts=i + 1), metadata={"i": i})
        for i in range(4)
    ]
    created = await store.enqueue_many_rollouts(requests)
    assert [r.input for r in created] == [0, 1, 2, 3]
    assert [r.config.max_attempts for r in created] == [1, 2, 3, 4]
    assert all(r.status == "queuing" and r.mode == "val" for r in created)
    first = await store.dequeue_many_rollouts(limit=3, worker_id="w")
    assert [r.rollout_id for r in first] == [r.rollout_id for r in created[:3]]
    assert all(r.attempt.worker_id == "w" for r in first)
    rest = await store.dequeue_many_rollouts(limit=3)
    assert [r.rollout_id for r in rest] == [created[3].rollout_id]
    assert await store.dequeue_many_rollouts(limit=0) == []


async def test_dequeue_many_with_non_positive_limit_claims_nothing(store: LightningStore) -> None:
    await store.enqueue_rollout(input=1)
    assert await store.dequeue_many_rollouts(limit=0) == []
    assert await store.dequeue_many_rollouts(limit=-1) == []
    assert (await store.dequeue_rollout()) is not None


async def test_requeued_rollout_goes_to_the_tail(store: LightningStore) -> None:
    a = await store.enqueue_rollout(input="a", config=RETRY_ON_FAILURE)
    b = await store.enqueue_rollout(input="b")
    c = await store.enqueue_rollout(input="c")
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == a.rollout_id
    await store.update_attempt(a.rollout_id, claimed.attempt.attempt_id, status="failed")
    assert (await store.get_rollout_by_id(a.rollout_id)).status == "requeuing"  # type: ignore[union-attr]
    order = [r.rollout_id for r in await drain(store)]
    assert order == [b.rollout_id, c.rollout_id, a.rollout_id]


async def test_rollout_is_never_queued_twice(store: LightningStore) -> None:
    rollout = await store.enqueue_rollout(input=1)
    await store.update_rollout(rollout.rollout_id, status="queuing")
    await store.update_rollout(rollout.rollout_id, status="requeuing")
    claimed = await drain(store)
    assert [r.rollout_id for r in claimed] == [rollout.rollout_id]


async def test_update_rollout_to_queuing_re_enqueues_exactly_once(store: LightningStore) -> None:
    rollout = await store.enqueue_rollout(input=1)
    first = await store.dequeue_rollout()
    assert first is not None
    await store.update_rollout(rollout.rollout_id, status="queuing")
    await store.update_rollout(rollout.rollout_id, status="queuing")
    again = await drain(store)
    assert [r.rollout_id for r in again] == [rollout.rollout_id]
    assert again[0].attempt.sequence_id == 2


async def test_dequeue_skips_rollouts_that_left_the_queue(store: LightningStore) -> None:
    a = await store.enqueue_rollout(input="a")
    b = await store.enqueue_rollout(input="b")
    await store.update_rollout(a.rollout_id, status="cancelled")
    claimed = await drain(store)
    assert [r.rollout_id for r in claimed] == [b.rollout_id]
    cancelled = await store.get_rollout_by_id(a.rollout_id)
    assert cancelled is not None and cancelled.status == "cancelled"
    assert (await store.query_attempts(a.rollout_id)).total == 0


async def test_rollout_requeued_by_hand_goes_to_the_tail(store: LightningStore) -> None:
    a = await store.enqueue_rollout(input="a")
    b = await store.enqueue_rollout(input="b")
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == a.rollout_id
    await store.update_rollout(a.rollout_id, status="requeuing")
    order = [r.rollout_id for r in await drain(store)]
    assert order == [b.rollout_id, a.rollout_id]


async def test_cancelled_rollout_stays_cancelled_when_its_attempt_finishes(store: LightningStore) -> None:
    await store.enqueue_rollout(input=1)
    claimed = await store.dequeue_rollout()
    assert claimed is not None
    await store.update_rollout(claimed.rollout_id, status="cancelled")
    await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")
    rollout = await store.get_rollout_by_id(claimed.rollout_id)
    assert rollout is not None and rollout.status == "cancelled"
    assert await store.dequeue_rollout() is None


# ---- start_rollout / start_attempt ----


async def test_start_rollout_bypasses_the_queue(store: LightningStore, clock: FakeClock) -> None:
    started = await store.start_rollout(input={"x": 1}, mode="test", worker_id="w-7", metadata={"m": 1})
    assert isinstance(started, AttemptedRollout)
    assert started.status == "preparing"
    assert started.start_time == clock.now
    assert started.mode == "test"
    assert started.metadata == {"m": 1}
    assert started.attempt.sequence_id == 1
    assert started.attempt.status == "preparing"
    assert started.attempt.worker_id == "w-7"
    assert await store.dequeue_rollout() is None
    assert await store.get_rollout_by_id(started.rollout_id) == started


async def test_start_attempt_creates_the_next_attempt(store: LightningStore) -> None:
    started = await store.start_rollout(input=1, config=RETRY_ON_FAILURE)
    await store.update_attempt(started.rollout_id, "latest", status="failed")
    retried = await store.start_attempt(started.rollout_id, worker_id="w-2")
    assert retried.status == "preparing"
    assert retried.end_time is None
    assert retried.attempt.sequence_id == 2
    assert retried.attempt.worker_id == "w-2"
    assert retried.attempt.attempt_id != started.attempt.attempt_id
    attempts = await store.query_attempts(started.rollout_id)
    assert [a.sequence_id for a in attempts] == [1, 2]
    latest = await store.get_latest_attempt(started.rollout_id)
    assert latest is not None and latest.attempt_id == retried.attempt.attempt_id


async def test_start_attempt_on_a_queued_rollout_takes_it_out_of_the_queue(store: LightningStore) -> None:
    rollout = await store.enqueue_rollout(input=1)
    started = await store.start_attempt(rollout.rollout_id)
    assert started.status == "preparing"
    assert await store.dequeue_rollout() is None


async def test_attempt_sequence_ids_count_existing_attempts(store: LightningStore) -> None:
    rollout = await store.enqueue_rollout(input=1, config=RETRY_ON_FAILURE)
    for expected in (1, 2, 3):
        claimed = await store.dequeue_rollout()
        assert claimed is not None and claimed.attempt.sequence_id == expected
        await store.update_attempt(rollout.rollout_id, "latest", status="failed")
    assert await store.dequeue_rollout() is None
    final = await store.get_rollout_by_id(rollout.rollout_id)
    assert final is not None and final.status == "failed"
    attempts = await store.query_attempts(rollout.rollout_id, sort_order="desc")
    assert [a.sequence_id for a in attempts] == [3, 2, 1]
    assert attempts.total == 3


async def test_query_attempts_paginates(store: LightningStore) -> None:
    rollout = await store.start_rollout(input=1)
    await store.start_attempt(rollout.rollout_id)
    await store.start_attempt(rollout.rollout_id)
    page = await store.query_attempts(rollout.rollout_id, limit=2, offset=1)
    assert [a.sequence_id for a in page] == [2, 3]
    assert page.total == 3 and page.limit == 2 and page.offset == 1
    assert (await store.query_attempts("ro-unknown")).total == 0
    assert await store.get_latest_attempt("ro-unknown") is None


# ---- attempt status -> rollout status ----


async def test_succeeded_attempt_finishes_the_rollout(store: LightningStore, clock: FakeClock) -> None:
    await store.enqueue_rollout(input=1)
    claimed = await store.dequeue_rollout()
    assert claimed is not None
    clock.advance(5)
    attempt = await store.update_attempt(claimed.rollout_id, claimed.attempt.attempt_id, status="succeeded")
    assert attempt.status == "succeeded"
    assert attempt.end_time == clock.now
    rollout = await store.get_rollout_by_id(claimed.rollout_id)
    assert rollout is not None and rollout.status == "succeeded"
    assert rollout.end_time == clock.now


async def test_failed_attempt_without_retry_fails_the_rollout(store: LightningStore) -> None:
    await store.enqueue_rollout(input=1)
    claimed = await store.dequeue_rollout()
    assert claimed is not None
    await store.update_attempt(claimed.rollout_id, "latest", status="failed")
    rollout = await store.get_rollout_by_id(claimed.rollout_id)
    assert rollout is not None and rollout.status == "failed" and rollout.end_time is not None
    assert await store.dequeue_rollout() is None


async def test_retry_only_for_listed_statuses(store: LightningStore) -> None:
    config = RolloutConfig(max_attempts=3, retry_condition=["timeout"])
    await store.enqueue_rollout(input=1, config=config)
    claimed = await store.dequeue_rollout()
    assert claimed is not None
    await store.update_attempt(claimed.rollout_id, "latest", status="failed")
    rollout = await store.get_rollout_by_id(claimed.rollout_id)
    assert rollout is not None and rollout.status == "failed"


async def test_retry_requeues_until_max_attempts(store: LightningStore) -> None:
    config = RolloutConfig(max_attempts=2, retry_condition=["unresponsive"])
    await store.enqueue_rollout(input=1, config=config)
    first = await store.dequeue_rollout()
    assert first is not None
    await store.update_attempt(first.rollout_id, "latest", status="unresponsive")
    rollout = await store.get_rollout_by_id(first.rollout_id)
    assert rollout is not None and rollout.status == "requeuing" and rollout.end_time is None
    second = await store.dequeue_rollout()
    assert second is not None and second.attempt.sequence_id == 2
    await store.update_attempt(second.rollout_id, "latest", status="unresponsive")
    rollout = await store.get_rollout_by_id(first.rollout_id)
    assert rollout is not None and rollout.status == "failed"
    assert await store.dequeue_rollout() is None


async def test_only_the_latest_attempt_drives_the_rollout(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    await store.update_attempt(started.rollout_id, "latest", status="running")
    second = await store.start_attempt(started.rollout_id)
    rollout = await store.get_rollout_by_id(started.rollout_id)
    assert rollout is not None and rollout.status == "preparing"
    await store.update_attempt(started.rollout_id, second.attempt.attempt_id, status="running")
    rollout = await store.get_rollout_by_id(started.rollout_id)
    assert rollout is not None and rollout.status == "running"


async def test_update_attempt_latest_alias_and_other_fields(store: LightningStore) -> None:
    # No watchdog limit: the heartbeat time written below is decades old.
    started = await store.start_rollout(input=1, config=RolloutConfig(unresponsive_seconds=None))
    updated = await store.update_attempt(
        started.rollout_id, "latest", worker_id="w-9", last_heartbeat_time=123.0, metadata={"k": "v"}
    )
    assert updated.attempt_id == started.attempt.attempt_id
    assert updated.worker_id == "w-9"
    assert updated.last_heartbeat_time == 123.0
    assert updated.metadata == {"k": "v"}
    assert updated.status == "preparing"
    rollout = await store.get_rollout_by_id(started.rollout_id)
    assert rollout is not None and rollout.status == "preparing"


@pytest.mark.backend_traits("null_clears")
async def test_update_attempt_none_clears_metadata(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    await store.update_attempt(started.rollout_id, "latest", worker_id="w-9", metadata={"k": "v"})
    cleared = await store.update_attempt(started.rollout_id, "latest", metadata=None)
    assert cleared.metadata is None and cleared.worker_id == "w-9"


async def test_attempt_end_time_only_for_finished_statuses(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    running = await store.update_attempt(started.rollout_id, "latest", status="running")
    assert running.end_time is None
    timed_out = await store.update_attempt(started.rollout_id, "latest", status="timeout")
    assert timed_out.end_time is None
    other = await store.start_rollout(input=2)
    failed = await store.update_attempt(other.rollout_id, "latest", status="failed")
    assert failed.end_time is not None


# ---- update_rollout ----


async def test_terminal_statuses_stamp_end_time(store: LightningStore, clock: FakeClock) -> None:
    for status in ("succeeded", "failed", "cancelled"):
        rollout = await store.enqueue_rollout(input=status)
        clock.advance(1)
        updated = await store.update_rollout(rollout.rollout_id, status=status)
        assert updated.status == status
        assert updated.end_time == clock.now


async def test_back_to_queue_from_running_has_no_end_time(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    await store.update_attempt(started.rollout_id, "latest", status="running")
    requeued = await store.update_rollout(started.rollout_id, status="queuing")
    assert requeued.status == "queuing" and requeued.end_time is None
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == started.rollout_id and claimed.attempt.sequence_id == 2


async def test_update_rollout_changes_only_given_fields(store: LightningStore) -> None:
    resources = await store.add_resources({"p": PromptTemplate(template="hi {x}")})
    rollout = await store.enqueue_rollout(input="old", mode="train", metadata={"a": 1})
    updated = await store.update_rollout(
        rollout.rollout_id,
        input="new",
        mode="val",
        resources_id=resources.resources_id,
        config=RolloutConfig(timeout_seconds=5.0),
        metadata={"b": 2},
    )
    assert updated.input == "new"
    assert updated.mode == "val"
    assert updated.resources_id == resources.resources_id
    assert updated.config.timeout_seconds == 5.0
    assert updated.metadata == {"b": 2}
    assert updated.status == "queuing"
    untouched = await store.update_rollout(rollout.rollout_id, metadata=None)
    assert untouched.metadata is None
    assert untouched.input == "new" and untouched.mode == "val"
    assert await store.get_rollout_by_id(rollout.rollout_id) == untouched


# ---- resources at enqueue / start ----


async def test_resources_id_resolves_to_latest_at_enqueue_and_start(store: LightningStore) -> None:
    without = await store.enqueue_rollout(input=0)
    assert without.resources_id is None
    first = await store.add_resources({"p": PromptTemplate(template="a")})
    queued = await store.enqueue_rollout(input=1)
    started = await store.start_rollout(input=2)
    assert queued.resources_id == first.resources_id
    assert started.resources_id == first.resources_id
    second = await store.update_resources("default", {"p": PromptTemplate(template="b")})
    later = await store.enqueue_rollout(input=3)
    assert later.resources_id == second.resources_id == "default"
    explicit = await store.enqueue_rollout(input=4, resources_id=first.resources_id)
    assert explicit.resources_id == first.resources_id
    stored = await store.get_rollout_by_id(queued.rollout_id)
    assert stored is not None and stored.resources_id == first.resources_id


# ---- wait_for_rollouts ----


async def test_wait_with_zero_timeout_is_a_snapshot_in_input_order(store: LightningStore) -> None:
    a = await store.enqueue_rollout(input="a")
    b = await store.enqueue_rollout(input="b")
    c = await store.enqueue_rollout(input="c")
    await store.update_rollout(c.rollout_id, status="succeeded")
    await store.update_rollout(a.rollout_id, status="failed")
    done = await store.wait_for_rollouts(
        rollout_ids=[c.rollout_id, "ro-unknown", b.rollout_id, a.rollout_id], timeout=0
    )
    assert [r.rollout_id for r in done] == [c.rollout_id, a.rollout_id]
    assert [r.status for r in done] == ["succeeded", "failed"]


async def test_wait_returns_partial_results_on_timeout(store: LightningStore) -> None:
    a = await store.enqueue_rollout(input="a")
    b = await store.enqueue_rollout(input="b")
    await store.update_rollout(b.rollout_id, status="cancelled")
    done = await store.wait_for_rollouts(rollout_ids=[a.rollout_id, b.rollout_id], timeout=0.05)
    assert [r.rollout_id for r in done] == [b.rollout_id]


async def test_wait_for_unknown_ids_returns_empty(store: LightningStore) -> None:
    assert await store.wait_for_rollouts(rollout_ids=["ro-000000000000"], timeout=0.05) == []


# ---- query_rollouts ----


async def _three_rollouts(store: LightningStore, clock: FakeClock) -> list[Rollout]:
    a = await store.enqueue_rollout(input="a")
    clock.advance(1)
    b = await store.enqueue_rollout(input="b")
    clock.advance(1)
    c = await store.enqueue_rollout(input="c")
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == a.rollout_id
    await store.update_rollout(c.rollout_id, status="succeeded")
    return [a, b, c]


async def test_query_rollouts_without_filters_returns_all_in_insertion_order(
    store: LightningStore, clock: FakeClock
) -> None:
    a, b, c = await _three_rollouts(store, clock)
    page = await store.query_rollouts()
    assert [r.rollout_id for r in page] == [a.rollout_id, b.rollout_id, c.rollout_id]
    assert page.total == 3 and page.limit == -1 and page.offset == 0
    first = page[0]
    assert isinstance(first, AttemptedRollout)
    assert first.attempt.sequence_id == 1
    assert not isinstance(page[1], AttemptedRollout)


async def test_query_rollouts_filters(store: LightningStore, clock: FakeClock) -> None:
    a, b, c = await _three_rollouts(store, clock)
    by_status = await store.query_rollouts(status_in=["queuing", "succeeded"])
    assert [r.rollout_id for r in by_status] == [b.rollout_id, c.rollout_id]
    by_id = await store.query_rollouts(rollout_id_in=[c.rollout_id, a.rollout_id, "ro-nope"])
    assert [r.rollout_id for r in by_id] == [a.rollout_id, c.rollout_id]
    contains = await store.query_rollouts(rollout_id_contains=b.rollout_id[3:9])
    assert [r.rollout_id for r in contains] == [b.rollout_id]
    both = await store.query_rollouts(status_in=["queuing"], rollout_id_in=[a.rollout_id, b.rollout_id])
    assert [r.rollout_id for r in both] == [b.rollout_id]
    either = await store.query_rollouts(status_in=["succeeded"], rollout_id_in=[a.rollout_id], filter_logic="or")
    assert [r.rollout_id for r in either] == [a.rollout_id, c.rollout_id]
    assert (await store.query_rollouts(status_in=[])).total == 0


async def test_query_rollouts_deprecated_aliases(store: LightningStore, clock: FakeClock) -> None:
    a, b, c = await _three_rollouts(store, clock)
    by_status = await store.query_rollouts(status=["preparing"])
    assert [r.rollout_id for r in by_status] == [a.rollout_id]
    by_ids = await store.query_rollouts(rollout_ids=[b.rollout_id])
    assert [r.rollout_id for r in by_ids] == [b.rollout_id]


async def test_query_rollouts_sorts(store: LightningStore, clock: FakeClock) -> None:
    a, b, c = await _three_rollouts(store, clock)
    desc = await store.query_rollouts(sort_by="start_time", sort_order="desc")
    assert [r.rollout_id for r in desc] == [c.rollout_id, b.rollout_id, a.rollout_id]
    by_status = await store.query_rollouts(sort_by="status")
    assert [r.status for r in by_status] == ["preparing", "queuing", "succeeded"]


async def test_none_sorts_first_ascending_and_last_descending(store: LightningStore, clock: FakeClock) -> None:
    a, b, c = await _three_rollouts(store, clock)
    clock.advance(10)
    await store.update_rollout(a.rollout_id, status="failed")
    asc = await store.query_rollouts(sort_by="end_time")
    assert [r.rollout_id for r in asc] == [b.rollout_id, c.rollout_id, a.rollout_id]
    desc = await store.query_rollouts(sort_by="end_time", sort_order="desc")
    assert [r.rollout_id for r in desc] == [a.rollout_id, c.rollout_id, b.rollout_id]


async def test_sort_ties_keep_insertion_order(store: LightningStore) -> None:
    created = [await store.enqueue_rollout(input=i) for i in range(4)]
    ids = [r.rollout_id for r in created]
    asc = await store.query_rollouts(sort_by="start_time")
    assert [r.rollout_id for r in asc] == ids
    desc = await store.query_rollouts(sort_by="status", sort_order="desc")
    assert [r.rollout_id for r in desc] == ids


async def test_query_rollouts_paginates_after_counting(store: LightningStore) -> None:
    created = [await store.enqueue_rollout(input=i) for i in range(5)]
    page = await store.query_rollouts(limit=2, offset=1)
    assert [r.rollout_id for r in page] == [r.rollout_id for r in created[1:3]]
    assert page.total == 5 and page.limit == 2 and page.offset == 1
    tail = await store.query_rollouts(limit=-1, offset=3)
    assert [r.rollout_id for r in tail] == [r.rollout_id for r in created[3:]]
    beyond = await store.query_rollouts(limit=10, offset=10)
    assert len(beyond) == 0 and beyond.total == 5
    filtered = await store.query_rollouts(status_in=["queuing"], limit=1)
    assert filtered.total == 5 and len(filtered) == 1


async def test_get_rollout_by_id_unknown_is_none(store: LightningStore) -> None:
    assert await store.get_rollout_by_id("ro-000000000000") is None


async def test_statistics_count_everything(store: LightningStore) -> None:
    await store.add_resources({"p": PromptTemplate(template="x")})
    await store.enqueue_rollout(input=1)
    started = await store.start_rollout(input=2)
    await store.add_span(span_of(started, 1))
    await store.update_worker("w-1")
    stats = await stats_of(store)
    assert isinstance(stats["name"], str) and stats["name"]
    assert stats["total_rollouts"] == 2
    assert stats["total_attempts"] == 1
    assert stats["total_spans"] == 1
    assert stats["total_resources"] == 1
    assert stats["total_workers"] == 1
    assert stats["uptime"] >= 0


@pytest.mark.backend_traits(TRAIT_BLOCKING_WAIT)
async def test_wait_is_woken_by_completion_from_another_task(store: LightningStore) -> None:
    a = await store.enqueue_rollout(input="a")
    b = await store.enqueue_rollout(input="b")
    waiting = asyncio.create_task(store.wait_for_rollouts(rollout_ids=[a.rollout_id, b.rollout_id], timeout=60))
    await asyncio.sleep(0)  # let the waiter take its first snapshot
    assert not waiting.done()
    await store.update_rollout(b.rollout_id, status="succeeded")
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == a.rollout_id
    await store.update_attempt(a.rollout_id, "latest", status="failed")
    done = await asyncio.wait_for(waiting, timeout=30)
    assert [(r.rollout_id, r.status) for r in done] == [(a.rollout_id, "failed"), (b.rollout_id, "succeeded")]


@pytest.mark.backend_traits(TRAIT_BLOCKING_WAIT)
async def test_wait_without_timeout_returns_when_all_finish(store: LightningStore) -> None:
    a = await store.enqueue_rollout(input="a")
    waiting = asyncio.create_task(store.wait_for_rollouts(rollout_ids=[a.rollout_id, "ro-unknown"]))
    await asyncio.sleep(0)
    await store.update_rollout(a.rollout_id, status="cancelled")
    done = await asyncio.wait_for(waiting, timeout=30)
    assert [r.rollout_id for r in done] == [a.rollout_id]
