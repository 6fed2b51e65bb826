"""The in-memory collections under CollectionBasedLightningStore: queue, key-value, filtered queries."""

from __future__ import annotations

import pytest

from agentlightning.store.collection import (
    CollectionBasedLightningStore,
    InMemoryCollection,
    InMemoryKeyValue,
    InMemoryLightningCollections,
    InMemoryQueue,
    matches_filters,
)
from agentlightning.types import Worker

from .backends import FakeClock


async def test_queue_is_fifo_and_unique() -> None:
    queue: InMemoryQueue[str] = InMemoryQueue()
    await queue.enqueue(["a", "b", "a", "c"])
    assert await queue.size() == 3
    assert await queue.peek(2) == ["a", "b"]
    assert await queue.has("b")
    assert await queue.dequeue(2) == ["a", "b"]
    assert await queue.dequeue(5) == ["c"]
    assert await queue.dequeue() == []


async def test_removed_then_re_enqueued_goes_to_the_tail() -> None:
    queue: InMemoryQueue[str] = InMemoryQueue()
    await queue.enqueue(["a", "b", "c"])
    await queue.remove("a")
    await queue.remove("missing")
    assert not await queue.has("a")
    await queue.enqueue(["a"])
    assert await queue.peek(10) == ["b", "c", "a"]
    assert await queue.dequeue(10) == ["b", "c", "a"]
    assert await queue.size() == 0


async def test_key_value_counters() -> None:
    kv: InMemoryKeyValue[str, int] = InMemoryKeyValue()
    assert await kv.inc("r") == 1
    assert await kv.inc("r", 2) == 3
    assert await kv.chmax("r", 2) == 3
    assert await kv.chmax("r", 10) == 10
    assert await kv.chmax("new", 0) == 0 and await kv.has("new")
    assert await kv.get("missing", 7) == 7
    assert await kv.pop("r") == 10
    assert await kv.size() == 1


async def test_collection_keys_and_indexes() -> None:
    workers: InMemoryCollection[Worker] = InMemoryCollection(lambda w: w.worker_id, indexes=("status",))
    await workers.insert(Worker(worker_id="a", status="idle"))
    await workers.insert(Worker(worker_id="b", status="busy"))
    await workers.insert(Worker(worker_id="c", status="idle"))
    with pytest.raises(ValueError, match="'a'"):
        await workers.insert(Worker(worker_id="a"))
    with pytest.raises(ValueError, match="'zz'"):
        await workers.update(Worker(worker_id="zz"))
    await workers.update(Worker(worker_id="a", status="busy"))
    busy = await workers.query({"status": {"exact": "busy"}})
    # Insertion order survives an index move.
    assert [w.worker_id for w in busy] == ["a", "b"]
    assert workers.keys_where("status", "idle") == ["c"]
    await workers.delete("b")
    assert await workers.count({"status": {"within": ["busy", "idle"]}}) == 2
    assert await workers.size() == 2


async def test_exact_index_lookups_answer_like_a_scan() -> None:
    """`{"_must": {field: {"exact": v}}}` on an indexed field is answered from the index: same items, order, count."""
    indexed: InMemoryCollection[Worker] = InMemoryCollection(lambda w: w.worker_id, indexes=("status",))
    scanned: InMemoryCollection[Worker] = InMemoryCollection(lambda w: w.worker_id)
    for worker_id, status in [("a", "idle"), ("b", "busy"), ("c", "idle"), ("d", "unknown"), ("e", "idle")]:
        for collection in (indexed, scanned):
            await collection.insert(Worker(worker_id=worker_id, status=status))  # type: ignore[arg-type]
    # Moves between buckets, a replacement keeping its bucket, and a deletion.
    for collection in (indexed, scanned):
        await collection.update(Worker(worker_id="a", status="busy"))
        await collection.update(Worker(worker_id="c", status="idle", last_heartbeat_time=5.0))
        await collection.upsert(Worker(worker_id="a", status="idle"))
        await collection.delete("e")
    for status in ("idle", "busy", "unknown", "missing"):
        only = {"_must": {"status": {"exact": status}}}
        expected = [w.worker_id for w in await scanned.query(only)]
        assert [w.worker_id for w in await indexed.query(only)] == expected
        assert await indexed.count(only) == await indexed.count_where("status", status) == len(expected)
        assert await scanned.count_where("status", status) == len(expected)  # no index: falls back to a scan
    assert [w.worker_id for w in await indexed.query({"_must": {"status": {"exact": "idle"}}})] == ["a", "c"]
    assert indexed.keys_where("status", "busy") == ["b"]
    assert (await indexed.query({"_must": {"status": {"exact": "idle"}}}, sort_by="last_heartbeat_time")).items[
        -1
    ].worker_id == "c"


async def test_query_filters_sorting_and_paging() -> None:
    workers: InMemoryCollection[Worker] = InMemoryCollection(lambda w: w.worker_id)
    for worker_id, status, t in [("w1", "idle", 3.0), ("w2", "busy", None), ("x3", "idle", 1.0), ("x4", "busy", 3.0)]:
        await workers.insert(Worker(worker_id=worker_id, status=status, last_heartbeat_time=t))  # type: ignore[arg-type]
    asc = await workers.query(sort_by="last_heartbeat_time")
    assert [w.worker_id for w in asc] == ["w2", "x3", "w1", "x4"]
    desc = await workers.query(sort_by="last_heartbeat_time", sort_order="desc")
    assert [w.worker_id for w in desc] == ["w1", "x4", "x3", "w2"]
    either = await workers.query(
        {"_aggregate": "or", "status": {"exact": "busy"}, "worker_id": {"contains": "3"}}, limit=2, offset=1
    )
    assert [w.worker_id for w in either] == ["x3", "x4"] and either.total == 3
    must = await workers.query(
        {"_must": {"worker_id": {"contains": "x"}}, "_aggregate": "or", "status": {"exact": "idle"}}
    )
    assert [w.worker_id for w in must] == ["x3"]


def test_matches_filters_conditions() -> None:
    worker = Worker(worker_id="runner-1", status="idle")
    assert matches_filters(worker, None)
    assert matches_filters(worker, {"worker_id": {"exact": "runner-1", "contains": "run"}})
    assert not matches_filters(worker, {"worker_id": {"exact": "runner-1", "contains": "zzz"}})
    assert not matches_filters(worker, {"current_rollout_id": {"contains": "ro"}})
    assert matches_filters(worker, {"_aggregate": "or"})


async def test_store_on_plain_collections(clock: FakeClock) -> None:
    store = CollectionBasedLightningStore(InMemoryLightningCollections(), clock=clock, scan_debounce_seconds=0)
    assert store.capabilities.get("thread_safe") is False
    rollout = await store.enqueue_rollout(input="x")
    claimed = await store.dequeue_rollout()
    assert claimed is not None and claimed.rollout_id == rollout.rollout_id
    stats = dict(await store.statistics())
    assert stats["name"] == "CollectionBasedLightningStore" and stats["total_attempts"] == 1
