"""PostgresLightningStore beyond the conformance suite: many processes, reopening, schema management.

Needs a PostgreSQL server at `AGL_TEST_POSTGRES_DSN` (default postgresql://postgres@127.0.0.1:5432/test);
every test works in its own schema, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import pickle
import sys
import uuid
from collections.abc import Iterator

import pytest

from agentlightning.store.postgres import PostgresLightningStore
from agentlightning.types import LLM, RolloutConfig

from .backends import POSTGRES_DSN
from .child_processes import run_together, start_children
from .factories import span_of

pytestmark = pytest.mark.postgres


def _connect_or_skip() -> object:
    try:
        import psycopg
    except ImportError:
        pytest.skip("PostgreSQL tests need psycopg: pip install agentlightning[postgres]")
    try:
        return psycopg.connect(POSTGRES_DSN, connect_timeout=3, autocommit=True)
    except Exception as exc:
        pytest.skip(f"no PostgreSQL server answers at {POSTGRES_DSN} (set AGL_TEST_POSTGRES_DSN): {exc}")


@pytest.fixture
def admin() -> Iterator[object]:
    conn = _connect_or_skip()
    yield conn
    conn.close()  # type: ignore[attr-defined]


@pytest.fixture
def schema(admin: object) -> Iterator[str]:
    name = f"agl_test_{uuid.uuid4().hex[:12]}"
    yield name
    admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')  # type: ignore[attr-defined]


def _tables_in(admin: object, schema: str) -> list[str]:
    rows = admin.execute(  # type: ignore[attr-defined]
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY table_name", (schema,)
    ).fetchall()
    return [row[0] for row in rows]


def test_capabilities_allow_sharing_between_processes(schema: str) -> None:
    store = PostgresLightningStore(POSTGRES_DSN, schema=schema)
    assert store.capabilities == {"thread_safe": True, "async_safe": True, "zero_copy": True, "otlp_traces": False}


async def test_tables_are_created_in_the_given_schema_and_dropped_with_it(admin: object, schema: str) -> None:
    store = PostgresLightningStore(POSTGRES_DSN, schema=schema)
    assert _tables_in(admin, schema) == []
    await store.enqueue_rollout(input=1)
    assert _tables_in(admin, schema) == [
        "agl_attempts",
        "agl_idempotency",
        "agl_meta",
        "agl_resources",
        "agl_rollouts",
        "agl_span_sequences",
        "agl_spans",
        "agl_workers",
    ]
    await store.drop_schema()
    row = admin.execute(  # type: ignore[attr-defined]
        "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (schema,)
    ).fetchone()
    assert row[0] == 0
    # The same store object starts over with empty tables.
    assert (await store.statistics())["total_rollouts"] == 0
    assert len(_tables_in(admin, schema)) == 8
    await store.close()


async def test_reopened_store_has_everything_and_continues_where_it_stopped(schema: str) -> None:
    first = PostgresLightningStore(POSTGRES_DSN, schema=schema)
    resources = await first.update_resources("default", {"llm": LLM(endpoint="http://llm", model="m")})
    running = await first.start_rollout(input={"task": "a"}, config=RolloutConfig(max_attempts=2), metadata={"k": 1})
    await first.add_many_spans([span_of(running, 1), span_of(running, 2)])
    queued = [await first.enqueue_rollout(input=i) for i in range(3)]
    await first.update_worker("worker-1", heartbeat_stats={"gpu": 0.5})
    before = (
        await first.query_rollouts(),
        await first.query_attempts(running.rollout_id),
        await first.query_spans(running.rollout_id),
        await first.query_workers(),
    )
    await first.close()

    second = PostgresLightningStore(POSTGRES_DSN, schema=schema)
    after = (
        await second.query_rollouts(),
        await second.query_attempts(running.rollout_id),
        await second.query_spans(running.rollout_id),
        await second.query_workers(),
    )
    assert after == before
    assert await second.get_latest_resources() == resources
    claimed = await second.dequeue_many_rollouts(limit=10)
    assert [r.rollout_id for r in claimed] == [r.rollout_id for r in queued]
    assert await second.get_next_span_sequence_id(running.rollout_id, running.attempt.attempt_id) == 3
    await second.close()


async def test_pickled_store_connects_to_the_same_schema(schema: str) -> None:
    store = PostgresLightningStore(POSTGRES_DSN, schema=schema)
    rollout = await store.enqueue_rollout(input="shared")
    copy = pickle.loads(pickle.dumps(store))
    assert await copy.get_rollout_by_id(rollout.rollout_id) == rollout
    await copy.close()
    await store.close()


def test_schema_name_must_be_an_identifier() -> None:
    with pytest.raises(ValueError, match="schema"):
        PostgresLightningStore(POSTGRES_DSN, schema='x"; DROP TABLE y; --')


def test_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)
    with pytest.raises(ImportError, match=r"pip install agentlightning\[postgres\]"):
        PostgresLightningStore(POSTGRES_DSN)


@pytest.mark.slow
async def test_processes_sharing_a_schema_never_dequeue_the_same_rollout(schema: str) -> None:
    store = PostgresLightningStore(POSTGRES_DSN, schema=schema)
    enqueued = await store.enqueue_many_rollouts([{"input": i} for i in range(120)])  # type: ignore[list-item]
    await store.close()

    children = start_children(
        [["dequeue", "postgres", POSTGRES_DSN, schema, "--limit", str(1 + i % 3)] for i in range(4)]
    )
    reports = run_together(children)

    claimed = [rollout_id for report in reports for rollout_id in report[-1]["claimed"]]
    assert len(claimed) == len(set(claimed)), "a rollout was handed out twice"
    assert set(claimed) == {r.rollout_id for r in enqueued}, "a rollout was lost"
    store = PostgresLightningStore(POSTGRES_DSN, schema=schema)
    assert (await store.statistics())["total_attempts"] == 120
    assert {r.status for r in await store.query_rollouts()} == {"preparing"}
    await store.close()


async def test_stores_starting_together_create_the_schema_once(admin: object, schema: str) -> None:
    # Each store has its own pool, i.e. its own server sessions, as separate processes would.
    # statistics() is not behind the watchdog, so a failed schema creation would surface here.
    stores = [PostgresLightningStore(POSTGRES_DSN, schema=schema, min_pool_size=1) for _ in range(8)]
    results = await asyncio.gather(*(store.statistics() for store in stores))
    assert [r["total_rollouts"] for r in results] == [0] * 8
    assert len(_tables_in(admin, schema)) == 8
    rollouts = await asyncio.gather(*(store.enqueue_rollout(input=i) for i, store in enumerate(stores)))
    assert (await stores[0].statistics())["total_rollouts"] == len({r.rollout_id for r in rollouts}) == 8
    for store in stores:
        await store.close()
