"""PostgreSQL engine: psycopg 3 async connections from a pool, one pool per event loop using the store.

Concurrency comes from the database, not from this process: transactions run at READ COMMITTED and
claim the rows they change (`SELECT ... FOR UPDATE`, `FOR UPDATE SKIP LOCKED` for the queue), so any
number of processes on any number of hosts can share one schema. Deadlocks and serialization failures
are retried a few times. The schema is created on first use under an advisory lock, so processes that
start together do not race on `CREATE TABLE`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Optional, TypeVar

from .dialect import TABLES, postgres_dialect
from .engine import Row, SqlEngine, TransactionBody
from .schema import schema_statements

__all__ = ["PostgresEngine", "import_psycopg"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_MAX_TRANSIENT_RETRIES = 8
_SCHEMA_LOCK_NAMESPACE = 0x61676C  # "agl": first key of the advisory lock guarding schema creation


def import_psycopg() -> tuple[Any, Any]:
    """`(psycopg, psycopg_pool)`, or an ImportError saying which extra to install."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ImportError(
            "PostgresLightningStore needs psycopg 3 and psycopg-pool; install them with "
            "`pip install agentlightning[postgres]`"
        ) from exc
    return psycopg, psycopg_pool


class _PostgresTransaction:
    """`SqlTransaction` over one psycopg async connection inside `conn.transaction()`."""

    __slots__ = ("_conn", "_render")

    def __init__(self, conn: Any, render: Any) -> None:
        self._conn = conn
        self._render = render

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        cursor = await self._conn.execute(self._render(sql), params)
        return cursor.rowcount

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        if len(rows) == 1:
            # A single row is cheaper as a plain statement than through executemany's pipeline.
            await self._conn.execute(self._render(sql), rows[0])
            return
        async with self._conn.cursor() as cursor:
            await cursor.executemany(self._render(sql), rows)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Optional[Row]:
        cursor = await self._conn.execute(self._render(sql), params)
        return await cursor.fetchone()

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        cursor = await self._conn.execute(self._render(sql), params)
        return await cursor.fetchall()


class PostgresEngine(SqlEngine):
    """Runs transaction bodies on pooled async connections; creates the schema on first use."""

    def __init__(self, dsn: str, *, schema: Optional[str] = None, min_pool_size: int = 1, max_pool_size: int = 10):
        import_psycopg()
        if min_pool_size < 0 or max_pool_size < 1 or min_pool_size > max_pool_size:
            raise ValueError(
                f"need 0 <= min_pool_size <= max_pool_size and max_pool_size >= 1, "
                f"got min_pool_size={min_pool_size}, max_pool_size={max_pool_size}"
            )
        self.dsn = dsn
        self.schema = schema
        self.min_pool_size = min_pool_size
        self.max_pool_size = max_pool_size
        self.dialect = postgres_dialect(schema)
        self._guard = threading.Lock()
        # psycopg async pools belong to the loop that opened them; a store shared by threads gets one each.
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self._opening: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
        self._schema_ready = False

    async def _pool(self) -> Any:
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is not None:
            return pool
        with self._guard:
            opening = self._opening.setdefault(loop, asyncio.Lock())
        async with opening:
            pool = self._pools.get(loop)
            if pool is not None:
                return pool
            _, psycopg_pool = import_psycopg()
            pool = psycopg_pool.AsyncConnectionPool(
                self.dsn,
                min_size=self.min_pool_size,
                max_size=self.max_pool_size,
                kwargs={"autocommit": True},
                open=False,
                name=f"agl-{self.schema or 'public'}",
            )
            await pool.open(wait=self.min_pool_size > 0)
            with self._guard:
                self._pools[loop] = pool
            return pool

    async def _create_schema(self, pool: Any) -> None:
        async with pool.connection() as conn:
            async with conn.transaction():
                key = self.schema or "public"
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_SCHEMA_LOCK_NAMESPACE, f"agl:{key}")
                )
                for statement in schema_statements(self.dialect):
                    await conn.execute(statement)
        self._schema_ready = True

    async def run(self, body: TransactionBody[T], *, write: bool) -> T:
        psycopg, _ = import_psycopg()
        transient = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
        pool = await self._pool()
        if not self._schema_ready:
            await self._create_schema(pool)
        for attempt in range(_MAX_TRANSIENT_RETRIES + 1):
            try:
                async with pool.connection() as conn:
                    tx = _PostgresTransaction(conn, self.dialect.render)
                    if not write:
                        # At READ COMMITTED every statement takes its own snapshot even inside BEGIN/COMMIT,
                        # so reads run on the autocommit connection and save those two round trips.
                        return await body(tx)
                    async with conn.transaction():
                        return await body(tx)
            except transient as exc:
                if attempt == _MAX_TRANSIENT_RETRIES:
                    raise
                logger.debug("retrying PostgreSQL transaction after %s", type(exc).__name__)
                await asyncio.sleep(random.uniform(0.001, 0.01) * (attempt + 1))
            except psycopg.DataError as exc:
                # Writes refuse NUL bytes up front (`_arguments.check_text`); a lookup by such a value cannot
                # match anything stored, and is refused as bad input rather than failing as a server error.
                if "NUL" in str(exc):
                    raise ValueError(f"store arguments must not contain NUL bytes (\\x00): {exc}") from exc
                raise
        raise AssertionError("unreachable")

    def storage_problem(self, exc: BaseException) -> Optional[str]:
        try:
            psycopg, _ = import_psycopg()
        except ImportError:
            return None
        # Class 53 (disk full, out of memory...) and a read-only transaction (a hot standby, a read-only server).
        if isinstance(exc, (psycopg.errors.InsufficientResources, psycopg.errors.ReadOnlySqlTransaction)):
            return f"PostgreSQL refuses writes: {exc}"
        return None

    async def drop_schema(self) -> None:
        """Drop everything the store created: the whole schema when one was given, else the agl_ tables."""
        pool = await self._pool()
        async with pool.connection() as conn:
            async with conn.transaction():
                if self.schema:
                    await conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
                else:
                    tables = ", ".join(self.dialect.table(name) for name in TABLES)
                    await conn.execute(f"DROP TABLE IF EXISTS {tables} CASCADE")
                    await conn.execute("DROP SEQUENCE IF EXISTS agl_queue_positions")
        self._schema_ready = False

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        with self._guard:
            pools = list(self._pools.items())
            self._pools.clear()
            self._opening.clear()
        for owner, pool in pools:
            if owner is loop:
                await pool.close()
            elif owner.is_running() and not owner.is_closed():
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(pool.close(), owner))
            else:
                logger.debug("PostgreSQL pool of a finished event loop dropped without closing")
