"""The SQL stores' idempotency ledger: one process does the work of a key, every process replays its answer.

Two store objects on one database stand for two `agl store --n-workers` processes.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentlightning.store.idempotency import IDEMPOTENCY_LEASE_SECONDS, IDEMPOTENCY_RETENTION_SECONDS, StoredAnswer
from agentlightning.store.sql.store import SqlLightningStore

from .backends import POSTGRES_DSN, FakeClock, _drop_postgres_schema, _postgres_reachable_or_skip

ANSWER = StoredAnswer(201, [(b"content-type", b"application/json"), (b"x-extra", b"\xe9")], b'[{"rollout_id": "r"}]')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def two_processes(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[SqlLightningStore, SqlLightningStore, FakeClock]]:
    clock = FakeClock()
    kwargs: dict[str, Any] = {"clock": clock, "scan_debounce_seconds": 0}
    if request.param == "sqlite":
        from agentlightning.store.sqlite import SqliteLightningStore

        stores = [SqliteLightningStore(tmp_path / "shared.db", **kwargs) for _ in range(2)]
        schema = None
    else:
        _postgres_reachable_or_skip()
        from agentlightning.store.postgres import PostgresLightningStore

        schema = f"agl_test_{uuid.uuid4().hex[:12]}"
        stores = [PostgresLightningStore(POSTGRES_DSN, schema=schema, **kwargs) for _ in range(2)]
    await stores[0].statistics()  # create the schema before the other store races for it
    try:
        yield stores[0], stores[1], clock
    finally:
        for store in stores:
            await store.close()
        if schema is not None:
            _drop_postgres_schema(schema)


async def test_one_process_works_and_every_process_replays_its_answer(
    two_processes: tuple[SqlLightningStore, SqlLightningStore, FakeClock],
) -> None:
    first, second, _ = two_processes
    a, b = first.idempotency_ledger(), second.idempotency_ledger()
    assert await a.claim("POST /x k1") is True
    assert await b.claim("POST /x k1") is False  # running elsewhere: ask again later
    assert await a.claim("POST /x k1") is False
    await a.keep("POST /x k1", ANSWER)
    assert await b.claim("POST /x k1") == ANSWER
    assert await a.claim("POST /x k1") == ANSWER
    assert await b.claim("POST /x k2") is True  # another key is other work


async def test_a_released_key_is_worked_again(
    two_processes: tuple[SqlLightningStore, SqlLightningStore, FakeClock],
) -> None:
    first, second, _ = two_processes
    assert await first.idempotency_ledger().claim("k") is True
    await first.idempotency_ledger().release("k")  # a 5xx: the work may not have happened
    assert await second.idempotency_ledger().claim("k") is True


async def test_concurrent_claims_of_one_key_have_one_winner(
    two_processes: tuple[SqlLightningStore, SqlLightningStore, FakeClock],
) -> None:
    first, second, _ = two_processes
    ledgers = [first.idempotency_ledger(), second.idempotency_ledger()] * 8
    results = await asyncio.gather(*(ledger.claim("contended") for ledger in ledgers))
    assert results.count(True) == 1 and results.count(False) == len(ledgers) - 1


async def test_a_dead_processs_key_is_taken_over_after_the_lease_and_old_answers_expire(
    two_processes: tuple[SqlLightningStore, SqlLightningStore, FakeClock],
) -> None:
    first, second, clock = two_processes
    assert await first.idempotency_ledger().claim("orphan") is True  # then the process dies
    clock.advance(IDEMPOTENCY_LEASE_SECONDS - 1)
    assert await second.idempotency_ledger().claim("orphan") is False
    clock.advance(2)
    assert await second.idempotency_ledger().claim("orphan") is True
    await second.idempotency_ledger().keep("orphan", ANSWER)
    clock.advance(IDEMPOTENCY_RETENTION_SECONDS + 1)
    ledger = first.idempotency_ledger()
    for i in range(300):  # claims delete expired rows now and then
        await ledger.claim(f"filler-{i}")
    assert await ledger.claim("orphan") is True  # forgotten: a retry this late does the work again
