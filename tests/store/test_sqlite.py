"""SqliteLightningStore beyond the conformance suite: durability, several processes on one file, reopening."""

from __future__ import annotations

import asyncio
import pickle
import sqlite3
from pathlib import Path

import pytest

from agentlightning.store.sqlite import SqliteLightningStore
from agentlightning.types import LLM, AttemptedRollout, RolloutConfig

from .child_processes import Child, run_together, start_children
from .factories import span_of


def test_capabilities_allow_sharing_between_threads_and_processes(tmp_path: Path) -> None:
    store = SqliteLightningStore(tmp_path / "store.db")
    assert store.capabilities == {"thread_safe": True, "async_safe": True, "zero_copy": True, "otlp_traces": False}


async def test_file_is_created_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "store.db"
    store = SqliteLightningStore(path)
    await store.enqueue_rollout(input=1)
    await store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_reopened_file_has_everything_and_continues_where_it_stopped(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    first = SqliteLightningStore(path)
    resources = await first.update_resources("default", {"llm": LLM(endpoint="http://llm", model="m")})
    running = await first.start_rollout(
        input={"task": "a"}, mode="train", config=RolloutConfig(max_attempts=2), metadata={"k": [1, 2]}
    )
    await first.add_many_spans([span_of(running, 1), span_of(running, 2)])
    queued = [await first.enqueue_rollout(input=i) for i in range(3)]
    await first.update_worker("worker-1", heartbeat_stats={"gpu": 0.5})
    before = {
        "rollouts": await first.query_rollouts(),
        "attempts": await first.query_attempts(running.rollout_id),
        "spans": await first.query_spans(running.rollout_id),
        "workers": await first.query_workers(),
        "resources": await first.get_latest_resources(),
    }
    await first.close()

    second = SqliteLightningStore(path)
    assert await second.query_rollouts() == before["rollouts"]
    assert await second.query_attempts(running.rollout_id) == before["attempts"]
    assert await second.query_spans(running.rollout_id) == before["spans"]
    assert await second.query_workers() == before["workers"]
    assert await second.get_latest_resources() == before["resources"] == resources
    # The queue order and the span sequence counter survive too.
    assert (await second.dequeue_rollout()) is not None
    rest = await second.dequeue_many_rollouts(limit=10)
    assert [r.input for r in rest] == [1, 2]
    assert rest[0].rollout_id == queued[1].rollout_id
    assert await second.get_next_span_sequence_id(running.rollout_id, running.attempt.attempt_id) == 3
    await second.close()


async def test_pickled_store_opens_the_same_file(tmp_path: Path) -> None:
    store = SqliteLightningStore(tmp_path / "store.db", scan_debounce_seconds=0)
    rollout = await store.enqueue_rollout(input="shared")
    copy = pickle.loads(pickle.dumps(store))
    assert isinstance(copy, SqliteLightningStore)
    assert await copy.get_rollout_by_id(rollout.rollout_id) == rollout
    await copy.close()
    await store.close()


async def test_completion_by_another_store_object_wakes_a_waiter_by_polling(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    waiting_side = SqliteLightningStore(path)
    waiting_side.wait_poll_seconds = 0.05
    working_side = SqliteLightningStore(path)
    rollout = await working_side.start_rollout(input=1)
    waiter = asyncio.create_task(waiting_side.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=60))
    assert await waiting_side.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0) == []
    await working_side.update_attempt(rollout.rollout_id, "latest", status="succeeded")
    finished = await waiter
    assert [r.rollout_id for r in finished] == [rollout.rollout_id]
    assert finished[0].status == "succeeded"
    await working_side.close()
    await waiting_side.close()


async def test_input_that_is_not_json_is_rejected_with_its_type(tmp_path: Path) -> None:
    store = SqliteLightningStore(tmp_path / "store.db")
    with pytest.raises(ValueError, match="object"):
        await store.enqueue_rollout(input=object())
    assert (await store.statistics())["total_rollouts"] == 0
    await store.close()


def test_bad_settings_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SqliteLightningStore(tmp_path / "a.db", synchronous="OFF")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="busy_timeout_seconds"):
        SqliteLightningStore(tmp_path / "a.db", busy_timeout_seconds=-1)


@pytest.mark.slow
async def test_writes_reported_before_sigkill_survive(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    child = Child("write", "sqlite", str(path))
    try:
        child.wait_ready()
        child.go()
        reported = [child.read() for _ in range(25)]
    finally:
        child.kill()  # SIGKILL, most likely in the middle of a transaction
    assert child.process.returncode == -9

    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store = SqliteLightningStore(path)
    for entry in reported:
        rollout = await store.get_rollout_by_id(entry["rollout_id"])
        assert isinstance(rollout, AttemptedRollout)
        assert rollout.status == "succeeded"
        assert rollout.input == {"index": entry["index"]}
        spans = await store.query_spans(entry["rollout_id"])
        assert [s.span_id for s in spans] == entry["span_ids"]
        assert [s.attributes["sequence_id"] for s in spans] == [1, 2, 3, 4, 5]
    # The killed process's half-done work, if any, is invisible or complete - never torn.
    for rollout in await store.query_rollouts():
        spans = await store.query_spans(rollout.rollout_id)
        assert len(spans) in (0, 5)
    await store.close()


@pytest.mark.slow
async def test_processes_sharing_a_file_never_dequeue_the_same_rollout(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    store = SqliteLightningStore(path)
    enqueued = await store.enqueue_many_rollouts([{"input": i} for i in range(120)])  # type: ignore[list-item]
    await store.close()

    children = start_children([["dequeue", "sqlite", str(path), "--limit", str(1 + i % 3)] for i in range(4)])
    reports = run_together(children)

    claimed = [rollout_id for report in reports for rollout_id in report[-1]["claimed"]]
    assert len(claimed) == len(set(claimed)), "a rollout was handed out twice"
    assert set(claimed) == {r.rollout_id for r in enqueued}, "a rollout was lost"
    store = SqliteLightningStore(path)
    assert [r.status for r in await store.query_rollouts()] == ["preparing"] * 120
    assert (await store.statistics())["total_attempts"] == 120
    await store.close()


async def test_enqueue_work_per_rollout_does_not_grow_with_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Enqueueing N rollouts is O(N): the next queue position is one index lookup, not a scan per row.

    Counted in SQLite VM steps (deterministic), never in seconds: before, each queued row ran MAX over
    the whole table, so a batch of 16k rollouts took minutes and blocked every other call.
    """
    from agentlightning.store.sql.sqlite_engine import SqliteEngine
    from agentlightning.types import EnqueueRolloutRequest

    steps = [0]
    connect = SqliteEngine._connect

    def counting(self: SqliteEngine) -> sqlite3.Connection:
        conn = connect(self)

        def tick() -> int:
            steps[0] += 1
            return 0  # keep going

        conn.set_progress_handler(tick, 1000)
        return conn

    monkeypatch.setattr(SqliteEngine, "_connect", counting)
    store = SqliteLightningStore(tmp_path / "store.db")
    try:
        await store.statistics()

        async def steps_per_rollout(count: int) -> float:
            before = steps[0]
            await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(count)])
            return (steps[0] - before) / count

        small_table = await steps_per_rollout(200)
        await steps_per_rollout(3000)
        large_table = await steps_per_rollout(200)  # the same batch into a table 16x larger
        assert large_table < 2 * small_table, (small_table, large_table)
        assert (await store.query_rollouts(status_in=["queuing"])).total == 3400
    finally:
        await store.close()
