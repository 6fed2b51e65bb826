"""`PostgresLightningStore`: the store in a PostgreSQL database, shared by processes on many hosts.

Needs the `postgres` extra (`pip install agentlightning[postgres]`: psycopg 3 and psycopg-pool).
Tables are created on first use. `schema=` keeps everything in one PostgreSQL schema (created if
missing), so several trainers - or tests - can share a database; `drop_schema()` removes it again.
"""

from __future__ import annotations

from typing import Any, Optional

from .sql.postgres_engine import PostgresEngine
from .sql.store import SqlLightningStore
from .utils import Clock

__all__ = ["PostgresLightningStore"]


class PostgresLightningStore(SqlLightningStore):
    """The LightningStore in PostgreSQL.

    Args:
        dsn: libpq connection string or URL, e.g. `postgresql://user@host:5432/dbname`.
        schema: PostgreSQL schema for the store's tables (None = the default `search_path`, i.e. public).
        min_pool_size / max_pool_size: connections kept per event loop using the store.
        scan_debounce_seconds: minimum time between watchdog scans (0 = scan before every call).
        clock: time source in seconds (tests inject a fake one); defaults to `time.time`.
        tracker: optional metrics backend for `agl.<group>.total/duration`.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: Optional[str] = None,
        min_pool_size: int = 1,
        max_pool_size: int = 10,
        scan_debounce_seconds: float = 10.0,
        clock: Optional[Clock] = None,
        tracker: Any = None,
    ) -> None:
        self.dsn = dsn
        self.schema = schema
        engine = PostgresEngine(dsn, schema=schema, min_pool_size=min_pool_size, max_pool_size=max_pool_size)
        super().__init__(engine, scan_debounce_seconds=scan_debounce_seconds, clock=clock, tracker=tracker)
        self._pg_engine = engine
        self._init_kwargs: dict[str, Any] = {
            "schema": schema,
            "min_pool_size": min_pool_size,
            "max_pool_size": max_pool_size,
            "scan_debounce_seconds": scan_debounce_seconds,
            "clock": clock,
            "tracker": tracker,
        }

    async def drop_schema(self) -> None:
        """Delete all the store's data and tables (the whole schema when `schema=` was given)."""
        await self._pg_engine.drop_schema()

    def __reduce__(self) -> Any:
        # Another process opens its own pool to the same database (capability zero_copy).
        return (_reopen_postgres, (self.dsn, self._init_kwargs))

    def __repr__(self) -> str:
        return f"PostgresLightningStore(schema={self.schema!r})"


def _reopen_postgres(dsn: str, kwargs: dict[str, Any]) -> PostgresLightningStore:
    return PostgresLightningStore(dsn, **kwargs)
