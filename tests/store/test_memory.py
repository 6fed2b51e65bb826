"""InMemoryLightningStore specifics: capabilities, thresholds, span eviction, statistics, tracking."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Optional

import pytest

from agentlightning.store import InMemoryLightningStore
from agentlightning.store.memory import estimate_model_size
from agentlightning.types import EnqueueRolloutRequest, Span

from .backends import FakeClock
from .factories import span_of, stats_of


def fixed_size(_: Span) -> int:
    return 100


def make_store(clock: FakeClock, **kwargs: Any) -> InMemoryLightningStore:
    if "span_size_estimator" in kwargs:
        kwargs.setdefault("record_size_estimator", lambda _: 0)  # count spans only unless a test sizes records
    return InMemoryLightningStore(clock=clock, scan_debounce_seconds=0, **kwargs)


def test_capabilities_follow_thread_safe() -> None:
    assert InMemoryLightningStore().capabilities == {
        "thread_safe": False,
        "async_safe": True,
        "zero_copy": False,
        "otlp_traces": False,
    }
    assert InMemoryLightningStore(thread_safe=True).capabilities.get("thread_safe") is True


async def test_default_thresholds_come_from_system_memory() -> None:
    stats = await stats_of(InMemoryLightningStore())
    capacity = stats["memory_capacity_bytes"]
    assert capacity > 0
    assert stats["eviction_threshold_bytes"] == int(capacity * 0.7)
    assert stats["safe_threshold_bytes"] == int(stats["eviction_threshold_bytes"] * 0.8)
    assert stats["total_span_bytes"] == 0


async def test_thresholds_accept_bytes_or_fractions() -> None:
    stats = await stats_of(InMemoryLightningStore(eviction_memory_threshold=5000, safe_memory_threshold=4000))
    assert (stats["eviction_threshold_bytes"], stats["safe_threshold_bytes"]) == (5000, 4000)
    ratio = await stats_of(InMemoryLightningStore(eviction_memory_threshold=0.5, safe_memory_threshold=0.25))
    capacity = ratio["memory_capacity_bytes"]
    assert ratio["eviction_threshold_bytes"] == int(capacity * 0.5)
    assert ratio["safe_threshold_bytes"] == int(capacity * 0.25)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"eviction_memory_threshold": 0}, "eviction_memory_threshold"),
        ({"eviction_memory_threshold": 1.5}, "eviction_memory_threshold"),
        ({"eviction_memory_threshold": "1GB"}, "eviction_memory_threshold"),
        ({"eviction_memory_threshold": True}, "eviction_memory_threshold"),
        ({"eviction_memory_threshold": 1000, "safe_memory_threshold": 2000}, "safe_memory_threshold"),
        ({"scan_debounce_seconds": -1}, "scan_debounce_seconds"),
    ],
)
def test_bad_thresholds_are_refused(kwargs: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        InMemoryLightningStore(**kwargs)


async def test_spans_of_the_oldest_rollouts_are_evicted(clock: FakeClock) -> None:
    store = make_store(clock, eviction_memory_threshold=1000, safe_memory_threshold=600, span_size_estimator=fixed_size)
    rollouts = []
    for i in range(3):
        rollouts.append(await store.start_rollout(input=i))
        clock.advance(1)
    old, middle, new = rollouts
    await store.add_many_spans([span_of(old, k) for k in range(4)])
    await store.add_many_spans([span_of(middle, k) for k in range(3)])
    await store.add_many_spans([span_of(new, k) for k in range(3)])
    assert (await stats_of(store))["total_span_bytes"] == 1000
    await store.add_span(span_of(new, 3))  # 1100 > 1000: evict oldest until <= 600
    stats = await stats_of(store)
    assert stats["total_span_bytes"] == 400
    assert stats["total_spans"] == 4
    for evicted in (old, middle):
        with pytest.raises(RuntimeError, match=evicted.rollout_id):
            await store.query_spans(evicted.rollout_id)
    assert (await store.query_spans(new.rollout_id)).total == 4


async def test_eviction_orders_by_rollout_start_time(clock: FakeClock) -> None:
    store = make_store(clock, eviction_memory_threshold=300, safe_memory_threshold=200, span_size_estimator=fixed_size)
    first = await store.start_rollout(input=1)
    clock.advance(1)
    second = await store.start_rollout(input=2)
    # The younger rollout writes first; eviction still goes by start time.
    await store.add_many_spans([span_of(second, 1), span_of(second, 2)])
    await store.add_many_spans([span_of(first, 1), span_of(first, 2)])
    with pytest.raises(RuntimeError, match=first.rollout_id):
        await store.query_spans(first.rollout_id)
    assert (await store.query_spans(second.rollout_id)).total == 2


async def test_spans_for_an_evicted_rollout_are_dropped_but_still_heartbeats(clock: FakeClock) -> None:
    store = make_store(clock, eviction_memory_threshold=200, safe_memory_threshold=100, span_size_estimator=fixed_size)
    old = await store.start_rollout(input=1)
    clock.advance(1)
    new = await store.start_rollout(input=2)
    await store.add_many_spans([span_of(old, 1), span_of(old, 2), span_of(new, 1)])
    clock.advance(5)
    assert await store.add_span(span_of(old, 3)) is None
    attempt = await store.get_latest_attempt(old.rollout_id)
    assert attempt is not None and attempt.last_heartbeat_time == clock.now and attempt.status == "running"
    assert (await stats_of(store))["total_span_bytes"] == 100


async def test_re_added_span_is_not_counted_twice(clock: FakeClock) -> None:
    sizes = iter([100, 300])  # the first add; a duplicate must not even be estimated

    def size(_: Span) -> int:
        return next(sizes)

    store = make_store(clock, span_size_estimator=size)
    started = await store.start_rollout(input=1)
    span = span_of(started, 1)
    await store.add_span(span)
    assert await store.add_span(span.model_copy(update={"name": "renamed"})) is None
    assert (await stats_of(store))["total_span_bytes"] == 100


def test_estimate_model_size_grows_with_content() -> None:
    small = Span.from_attributes(attributes={"k": "v"})
    large = Span.from_attributes(attributes={"k": "v" * 10_000, "list": list(range(100))})
    assert 0 < estimate_model_size(small) < estimate_model_size(large)
    assert estimate_model_size(large) > 10_000
    assert estimate_model_size({"a": [1, 2.0, None, True]}) > estimate_model_size({})


class RecordingTracker:
    """The metrics-backend surface the store uses, recording calls."""

    def __init__(self) -> None:
        self.counters: dict[tuple[str, str, str], float] = {}
        self.observed: list[tuple[str, float]] = []
        self.registered: list[str] = []

    def register_counter(self, name: str, label_names: Any = (), description: str = "") -> None:
        self.registered.append(name)

    def register_histogram(self, name: str, label_names: Any = (), buckets: Any = None, description: str = "") -> None:
        self.registered.append(name)

    def inc_counter(self, name: str, amount: float = 1.0, labels: Optional[dict[str, str]] = None) -> None:
        assert labels is not None
        key = (name, labels["method"], labels["status"])
        self.counters[key] = self.counters.get(key, 0) + amount

    def observe_histogram(self, name: str, value: float, labels: Optional[dict[str, str]] = None) -> None:
        self.observed.append((name, value))


async def test_every_call_is_tracked(clock: FakeClock) -> None:
    tracker = RecordingTracker()
    store = make_store(clock, tracker=tracker)
    assert "agl.rollouts.total" in tracker.registered and "agl.spans.duration" in tracker.registered
    started = await store.start_rollout(input=1)
    await store.add_span(span_of(started, 1))
    with pytest.raises(ValueError):
        await store.update_rollout("ro-missing", status="failed")
    assert tracker.counters[("agl.rollouts.total", "start_rollout", "ok")] == 1
    assert tracker.counters[("agl.spans.total", "add_span", "ok")] == 1
    assert tracker.counters[("agl.rollouts.total", "update_rollout", "error")] == 1
    assert all(value >= 0 for _, value in tracker.observed)


async def test_thread_safe_store_serves_threads_with_their_own_loops(clock: FakeClock) -> None:
    store = make_store(clock, thread_safe=True)
    created = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(200)])
    claimed: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        async def loop() -> None:
            while (rollout := await store.dequeue_rollout()) is not None:
                await store.add_span(span_of(rollout, 1))
                await store.update_attempt(rollout.rollout_id, "latest", status="succeeded")
                with lock:
                    claimed.append(rollout.rollout_id)

        asyncio.run(loop())

    threads = [threading.Thread(target=work) for _ in range(6)]
    await asyncio.to_thread(lambda: ([t.start() for t in threads], [t.join() for t in threads]))
    assert sorted(claimed) == sorted(r.rollout_id for r in created)
    assert (await store.query_rollouts(status_in=["succeeded"])).total == 200
    assert (await stats_of(store))["total_spans"] == 200


async def test_finished_rollouts_lose_their_spans_before_live_ones(clock: FakeClock) -> None:
    store = make_store(clock, eviction_memory_threshold=400, safe_memory_threshold=300, span_size_estimator=fixed_size)
    live = await store.start_rollout(input="still running")
    clock.advance(1)
    done = await store.start_rollout(input="finished")
    await store.add_many_spans([span_of(live, 1), span_of(live, 2)])
    await store.add_many_spans([span_of(done, 1), span_of(done, 2)])
    await store.update_attempt(done.rollout_id, "latest", status="succeeded")
    await store.add_span(span_of(live, 3))  # 500 > 400: the finished rollout goes first, although younger
    assert (await store.query_spans(live.rollout_id)).total == 3
    with pytest.raises(RuntimeError, match=done.rollout_id):
        await store.query_spans(done.rollout_id)
    assert (await stats_of(store))["total_span_bytes"] == 300


def record_size(_: Any) -> int:
    return 100


async def test_finished_rollouts_are_dropped_whole_when_spans_do_not_free_enough(clock: FakeClock) -> None:
    store = make_store(
        clock,
        eviction_memory_threshold=1000,
        safe_memory_threshold=500,
        span_size_estimator=fixed_size,
        record_size_estimator=record_size,
    )
    live = await store.start_rollout(input="live")  # 200 bytes: the rollout and its attempt
    finished = []
    for i in range(4):
        clock.advance(1)
        started = await store.start_rollout(input=i)
        await store.update_attempt(started.rollout_id, "latest", status="succeeded")
        finished.append(started)
    assert (await stats_of(store))["total_record_bytes"] == 1000
    queued = await store.enqueue_rollout(input="queued")  # 1100 > 1000: drop finished rollouts, oldest first
    stats = await stats_of(store)
    assert stats["total_record_bytes"] == 500 and stats["total_rollouts"] == 3
    for gone in finished[:3]:
        assert await store.get_rollout_by_id(gone.rollout_id) is None
        assert (await store.query_attempts(gone.rollout_id)).total == 0
    for kept in (live, finished[3], queued):
        assert await store.get_rollout_by_id(kept.rollout_id) is not None
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == queued.rollout_id


async def test_live_rollouts_are_never_dropped_whole(clock: FakeClock) -> None:
    store = make_store(
        clock,
        eviction_memory_threshold=300,
        safe_memory_threshold=200,
        span_size_estimator=fixed_size,
        record_size_estimator=record_size,
    )
    rollouts = [await store.enqueue_rollout(input=i) for i in range(5)]
    started = await store.start_rollout(input="running")
    await store.add_span(span_of(started, 1))
    assert (await store.query_rollouts()).total == 6  # over budget, but nothing here may go
    with pytest.raises(RuntimeError, match=started.rollout_id):
        await store.query_spans(started.rollout_id)
    assert [r.rollout_id for r in await store.dequeue_many_rollouts(limit=10)] == [r.rollout_id for r in rollouts]


async def test_a_long_run_stays_under_the_memory_budget() -> None:
    """Real memory, measured by tracemalloc: 600 rollouts with 5 x 1 KB spans each hold ~14 MB unbounded."""
    import gc
    import tracemalloc

    from .factories import make_span

    budget = 1024 * 1024
    store = InMemoryLightningStore(eviction_memory_threshold=budget, scan_debounce_seconds=60)
    payload = "p" * 1024
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(600):
            await store.enqueue_rollout(input={"task": i})
            claimed = await store.dequeue_rollout(worker_id=f"w-{i % 8}")
            assert claimed is not None
            spans = [
                make_span(claimed.rollout_id, claimed.attempt.attempt_id, k + 1, attributes={"p": payload})
                for k in range(5)
            ]
            await store.add_many_spans(spans)
            await store.update_attempt(claimed.rollout_id, "latest", status="succeeded")
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    stats = await stats_of(store)
    assert stats["total_span_bytes"] + stats["total_record_bytes"] <= budget
    assert grown < 2 * budget, f"the store grew by {grown / 1e6:.1f} MB under a {budget / 1e6:.1f} MB budget"


class CountingId(str):
    """A rollout id that counts the equality tests made against it (membership tests in a list make one each)."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        CountingId.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


async def test_filtering_by_many_ids_costs_o_n_not_n_times_m() -> None:
    """100k ids used to take 224 s (each rollout and attempt tested against the whole id list); now set lookups.

    Counted in comparisons (deterministic), never in seconds.
    """
    store = InMemoryLightningStore()
    count = 3000
    rollouts = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(count)])
    for _ in range(count // 2):  # half of them have attempts too (queried for their latest attempt)
        assert await store.dequeue_rollout() is not None
    ids = [CountingId(r.rollout_id) for r in rollouts]
    CountingId.comparisons = 0
    page = await store.query_rollouts(rollout_id_in=ids)
    finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
    assert page.total == count and finished == []
    assert sum(1 for r in page.items if hasattr(r, "attempt")) == count // 2
    assert CountingId.comparisons < 10 * count, CountingId.comparisons  # a scan per id would be ~count**2 / 2
    await store.close()
