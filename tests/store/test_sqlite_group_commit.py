"""SQLite group commit: concurrent writes share one transaction, each call stays atomic on its own."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from agentlightning.store.sql.engine import SqlTransaction
from agentlightning.store.sql.sqlite_engine import SqliteEngine
from agentlightning.store.sqlite import SqliteLightningStore


async def test_concurrent_writes_share_transactions_and_all_land(tmp_path: Path) -> None:
    store = SqliteLightningStore(tmp_path / "store.db")
    engine = store._engine  # type: ignore[attr-defined]
    assert isinstance(engine, SqliteEngine)
    await store.statistics()  # open the database first
    rollouts = await asyncio.gather(*(store.enqueue_rollout(input=i) for i in range(64)))
    assert engine.write_calls == 64
    assert engine.write_transactions < 64  # grouped: fewer commits than calls
    assert (await store.query_rollouts()).total == 64
    claimed = await asyncio.gather(*(store.dequeue_rollout(worker_id=f"w-{i}") for i in range(64)))
    assert sorted(c.rollout_id for c in claimed if c is not None) == sorted(r.rollout_id for r in rollouts)
    await store.close()


async def test_without_grouping_every_write_commits_alone(tmp_path: Path) -> None:
    store = SqliteLightningStore(tmp_path / "store.db", group_commit_limit=1)
    engine = store._engine  # type: ignore[attr-defined]
    assert isinstance(engine, SqliteEngine)
    await asyncio.gather(*(store.enqueue_rollout(input=i) for i in range(16)))
    assert (engine.write_calls, engine.write_transactions) == (16, 16)
    await store.close()


async def test_a_failing_call_is_rolled_back_alone(tmp_path: Path) -> None:
    engine = SqliteEngine(str(tmp_path / "engine.db"))

    def writer(key: str, fail: bool):  # type: ignore[no-untyped-def]
        async def body(tx: SqlTransaction) -> str:
            await tx.execute("INSERT INTO {meta} (key, value) VALUES (?, ?)", (key, "v"))
            if fail:
                raise ValueError(f"call {key} refused after writing")
            return key

        return body

    calls = [engine.run(writer(f"k{i}", fail=i % 3 == 0), write=True) for i in range(30)]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    failed = {f"k{i}" for i in range(30) if i % 3 == 0}
    for i, outcome in enumerate(outcomes):
        if f"k{i}" in failed:
            assert isinstance(outcome, ValueError) and f"k{i}" in str(outcome)
        else:
            assert outcome == f"k{i}"

    async def read(tx: SqlTransaction) -> set[str]:
        return {row[0] for row in await tx.fetchall("SELECT key FROM {meta} WHERE key LIKE 'k%'")}

    assert await engine.run(read, write=False) == {f"k{i}" for i in range(30)} - failed
    await engine.close()


def test_group_commit_limit_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="group_commit_limit"):
        SqliteEngine(str(tmp_path / "x.db"), group_commit_limit=0)


async def test_a_lone_failing_call_is_rolled_back_and_not_counted_as_a_commit(tmp_path: Path) -> None:
    engine = SqliteEngine(str(tmp_path / "engine.db"))

    async def refused(tx: SqlTransaction) -> None:
        await tx.execute("INSERT INTO {meta} (key, value) VALUES (?, ?)", ("lone", "v"))
        raise ValueError("lone call refused after writing")

    async def accepted(tx: SqlTransaction) -> str:
        await tx.execute("INSERT INTO {meta} (key, value) VALUES (?, ?)", ("after", "v"))
        return "after"

    with pytest.raises(ValueError, match="lone call refused"):
        await engine.run(refused, write=True)
    assert await engine.run(accepted, write=True) == "after"
    assert (engine.write_calls, engine.write_transactions) == (2, 1)

    async def read(tx: SqlTransaction) -> set[str]:
        return {row[0] for row in await tx.fetchall("SELECT key FROM {meta} WHERE key IN ('lone', 'after')")}

    assert await engine.run(read, write=False) == {"after"}
    await engine.close()


async def test_a_write_cancelled_while_queued_is_skipped_and_one_cancelled_while_running_commits(
    tmp_path: Path,
) -> None:
    engine = SqliteEngine(str(tmp_path / "engine.db"))
    running, release = threading.Event(), threading.Event()

    async def slow(tx: SqlTransaction) -> str:
        await tx.execute("INSERT INTO {meta} (key, value) VALUES (?, ?)", ("slow", "v"))
        running.set()
        release.wait(10)  # on the SQLite thread: holds the transaction open
        return "slow"

    async def queued(tx: SqlTransaction) -> str:
        await tx.execute("INSERT INTO {meta} (key, value) VALUES (?, ?)", ("queued", "v"))
        return "queued"

    first = asyncio.ensure_future(engine.run(slow, write=True))
    assert await asyncio.to_thread(running.wait, 10)
    second = asyncio.ensure_future(engine.run(queued, write=True))
    await asyncio.sleep(0)  # `second` is queued behind the running transaction
    first.cancel()
    second.cancel()
    release.set()
    for task in (first, second):
        with pytest.raises(asyncio.CancelledError):
            await task

    async def keys(tx: SqlTransaction) -> set[str]:
        return {row[0] for row in await tx.fetchall("SELECT key FROM {meta} WHERE key IN ('slow', 'queued')")}

    assert await engine.run(queued, write=True) == "queued"  # the engine keeps answering
    assert await engine.run(keys, write=False) == {"slow", "queued"}
    assert engine.write_calls == 2  # the cancelled queued call never ran
    await engine.close()
