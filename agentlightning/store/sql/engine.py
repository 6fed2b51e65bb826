"""How the SQL store runs a transaction: a small interface each database driver implements.

Store logic is written as async *transaction bodies* that only await the `SqlTransaction` they are given.
That lets one body run on an async driver (PostgreSQL, where each statement is a network round trip)
and, unchanged, synchronously on SQLite's own thread (where nothing ever needs to suspend).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any, Callable, Optional, Protocol, TypeVar

from .dialect import SqlDialect

__all__ = ["Row", "SqlTransaction", "SqlEngine", "TransactionBody", "run_without_suspending"]

T = TypeVar("T")
Row = tuple[Any, ...]


class SqlTransaction(Protocol):
    """Statements of one open transaction. SQL is a dialect template (see `SqlDialect.render`)."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; returns the number of rows it changed."""
        ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Optional[Row]: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...


TransactionBody = Callable[[SqlTransaction], Awaitable[T]]


class SqlEngine(ABC):
    """Runs transaction bodies against one database; owns connections and schema creation."""

    dialect: SqlDialect

    @abstractmethod
    async def run(self, body: TransactionBody[T], *, write: bool) -> T:
        """Run `body` in one transaction and commit it; roll back and re-raise on error.

        `write=True` transactions take the database's write lock up front (SQLite `BEGIN IMMEDIATE`),
        so they never fail half-way on lock upgrades. `write=False` bodies only read; an engine may run
        them without BEGIN/COMMIT when that gives the same guarantees (PostgreSQL at READ COMMITTED).
        Engines may re-run a body after a transient conflict, so bodies must have no effects outside
        the transaction.
        """

    @abstractmethod
    async def close(self) -> None:
        """Release connections and threads. Idempotent; the engine reopens on next use."""

    def storage_problem(self, exc: BaseException) -> Optional[str]:
        """What `exc` says about the storage when the database refused for want of room or write access; else None."""
        return None


def run_without_suspending(coroutine: Coroutine[Any, Any, T]) -> T:
    """Drive a coroutine that never suspends to completion, synchronously, on the calling thread."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError(
        "a SQL transaction body awaited something other than its transaction; bodies must only await "
        "SqlTransaction methods so they can run on SQLite's thread"
    )
