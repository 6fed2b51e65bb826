"""A full disk or a read-only database is a 503 that says so, and `/health` reports it until writes work again.

Before: a generic 500 with an error id, while `/health` answered "ok". The full disk is SQLite's own
(`PRAGMA max_page_count`), the read-only database a `mode=ro` URI: real SQLite errors, no mocks.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentlightning.store import LightningStoreServer
from agentlightning.store.base import StorageUnavailableError
from agentlightning.store.sql.sqlite_engine import SqliteEngine
from agentlightning.store.sqlite import SqliteLightningStore

API = "/v1/agl"


@pytest.fixture
def page_limit(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """`limit[0]` pages at most per SQLite connection opened from now on (0: no limit)."""
    limit = [0]
    connect = SqliteEngine._connect

    def limited(self: SqliteEngine) -> sqlite3.Connection:
        conn = connect(self)
        if limit[0]:
            conn.execute(f"PRAGMA max_page_count = {limit[0]}")
        return conn

    monkeypatch.setattr(SqliteEngine, "_connect", limited)
    return limit


async def _fill(store: SqliteLightningStore) -> StorageUnavailableError:
    for i in range(2000):  # bounded: a few dozen pages fill up long before
        try:
            await store.enqueue_rollout(input={"payload": "x" * 2000, "i": i})
        except StorageUnavailableError as exc:
            return exc
    raise AssertionError("the database never filled up")


async def test_a_full_disk_is_a_clear_error_and_clears_once_writes_work(tmp_path: Path, page_limit: list[int]) -> None:
    page_limit[0] = 40
    store = SqliteLightningStore(tmp_path / "full.db")
    try:
        error = await _fill(store)
        assert "full" in str(error) and "nothing was written" in str(error)
        assert store.storage_problem() is not None
        assert (await store.query_rollouts()).total > 0  # reads still work
        page_limit[0] = 0
        await store.close()  # reopens without the limit: space was freed
        await store.enqueue_rollout(input=1)
        assert store.storage_problem() is None
    finally:
        await store.close()


async def test_over_http_a_full_disk_is_503_and_health_says_so(tmp_path: Path, page_limit: list[int]) -> None:
    page_limit[0] = 40
    store = SqliteLightningStore(tmp_path / "full.db")
    server = LightningStoreServer(store, port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.endpoint + API, timeout=30) as http:
            assert (await http.get("/health")).json() == {"status": "ok"}
            answer: Any = None
            for i in range(2000):
                answer = await http.post("/rollouts", json={"input": {"payload": "x" * 2000, "i": i}})
                if answer.status_code != 201:
                    break
            assert answer is not None and answer.status_code == 503, answer.text
            assert answer.json()["error_type"] == "StorageUnavailableError" and "full" in answer.json()["detail"]
            health = await http.get("/health")
            assert health.status_code == 503 and health.json()["status"] == "unavailable"
            assert "full" in health.json()["detail"]
    finally:
        await server.stop()
        await store.close()


async def test_a_read_only_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    writable = SqliteLightningStore(path)
    await writable.enqueue_rollout(input=1)
    await writable.close()
    read_only = SqliteLightningStore(f"file:{path}?mode=ro")
    try:
        with pytest.raises(StorageUnavailableError, match="refuses writes"):
            await read_only.enqueue_rollout(input=2)
        assert read_only.storage_problem() is not None
    finally:
        await read_only.close()


@pytest.mark.postgres
async def test_a_read_only_postgres_is_a_clear_error() -> None:
    import uuid

    from tests.store.backends import POSTGRES_DSN, _drop_postgres_schema, _postgres_reachable_or_skip

    _postgres_reachable_or_skip()
    from agentlightning.store.postgres import PostgresLightningStore

    schema = f"agl_test_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in POSTGRES_DSN else "?"
    read_only_dsn = f"{POSTGRES_DSN}{separator}options=-c%20default_transaction_read_only%3Don"
    store = PostgresLightningStore(read_only_dsn, schema=schema)
    try:
        with pytest.raises(StorageUnavailableError, match="PostgreSQL refuses writes"):
            await store.enqueue_rollout(input=1)
        assert store.storage_problem() is not None
    finally:
        await store.close()
        _drop_postgres_schema(schema)
