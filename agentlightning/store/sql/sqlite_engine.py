"""SQLite engine: one connection on one dedicated thread; every transaction runs there start to finish.

Durability: the database uses WAL journaling with `synchronous=NORMAL` by default. A transaction whose
COMMIT returned is in the WAL file, so it survives the process being killed (SIGKILL included); only an
operating-system crash or power loss may lose the last few commits. Pass `synchronous="FULL"` to fsync
every commit and survive those too, at a large cost in write throughput.

Several processes may open the same file: write transactions start with `BEGIN IMMEDIATE`, which takes
SQLite's single write lock up front (waiting up to `busy_timeout_seconds`), so two processes never see
the same queue head and no transaction fails half-way on a lock upgrade.

Group commit: concurrent write calls share one transaction. Writes queue up while the thread commits;
the thread then runs everything queued (up to `group_commit_limit` calls) in one `BEGIN IMMEDIATE ...
COMMIT`, each call inside its own SAVEPOINT so a call that raises is rolled back alone. No call is answered
before the COMMIT that holds it returned: acknowledged still means durable. A lone writer pays nothing
extra (it is committed at once, without a savepoint); many writers pay one commit per group instead of one each.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Literal, Optional, TypeVar

from .dialect import SQLITE
from .engine import Row, SqlEngine, TransactionBody, run_without_suspending
from .schema import schema_statements

__all__ = ["SqliteEngine", "SqliteSynchronous"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
SqliteSynchronous = Literal["NORMAL", "FULL"]

# Waiting for another process's write lock: SQLite's own busy handler sleeps up to 100 ms between tries,
# which wastes most of the time under contention; we retry with short jittered sleeps instead.
_RETRY_FIRST_SLEEP = 0.0005
_RETRY_MAX_SLEEP = 0.005


# SQLite result codes (and, before Python 3.11, messages) that mean the storage refused: read-only file or
# database, disk full, I/O error, file that cannot be opened.
_STORAGE_ERRORS = ("SQLITE_READONLY", "SQLITE_FULL", "SQLITE_IOERR", "SQLITE_CANTOPEN")
_STORAGE_MESSAGES = ("readonly database", "read-only", "disk is full", "disk i/o error", "unable to open database")


class _Reply:
    """Where a write call's outcome goes: the caller's asyncio future, set on the caller's loop.

    Answering through the loop directly (one `call_soon_threadsafe`) spares every write the chain of a
    `concurrent.futures.Future` wrapped by `asyncio.wrap_future`.
    """

    __slots__ = ("loop", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]) -> None:
        self.loop = loop
        self.future = future

    def wanted(self) -> bool:
        """False once the caller gave up (cancelled) before the call ran: it is then skipped, as never sent."""
        return not self.future.cancelled()

    def send(self, ok: bool, value: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(_settle, self.future, ok, value)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting for this answer
            pass


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # cancelled while the call ran: its outcome stands in the database, unanswered
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


_PendingWrite = tuple[TransactionBody[Any], _Reply]


class _SqliteTransaction:
    """`SqlTransaction` over a sqlite3 connection; its coroutines complete without suspending."""

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self._conn.execute(SQLITE.render(sql), params).rowcount

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._conn.executemany(SQLITE.render(sql), rows)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Optional[Row]:
        return self._conn.execute(SQLITE.render(sql), params).fetchone()

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._conn.execute(SQLITE.render(sql), params).fetchall()


class SqliteEngine(SqlEngine):
    """Runs transaction bodies on a private thread holding the only connection this object uses."""

    dialect = SQLITE

    def __init__(
        self,
        path: str,
        *,
        busy_timeout_seconds: float = 30.0,
        synchronous: SqliteSynchronous = "NORMAL",
        group_commit_limit: int = 256,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        if busy_timeout_seconds < 0:
            raise ValueError(f"busy_timeout_seconds must be >= 0, got {busy_timeout_seconds}")
        if isinstance(group_commit_limit, bool) or not isinstance(group_commit_limit, int) or group_commit_limit < 1:
            raise ValueError(
                f"group_commit_limit must be an integer >= 1 (1 = no grouping), got {group_commit_limit!r}"
            )
        self.group_commit_limit = group_commit_limit
        self.path = os.fspath(path)
        self.busy_timeout_seconds = busy_timeout_seconds
        self.synchronous = synchronous
        self._guard = threading.Lock()
        self._executor: Optional[ThreadPoolExecutor] = None
        self._conn: Optional[sqlite3.Connection] = None
        self._pid = os.getpid()
        # Write calls waiting for the thread, and whether a drain of them is scheduled (both under _guard).
        self._pending: deque[_PendingWrite] = deque()
        self._draining = False
        self.write_calls = 0
        """Write calls committed or refused so far."""
        self.write_transactions = 0
        """Write transactions committed so far: fewer than `write_calls` when groups formed."""

    def _ensure_executor(self) -> ThreadPoolExecutor:
        with self._guard:
            if self._pid != os.getpid():
                # Forked: the parent's thread and connection do not exist here; open our own.
                self._executor, self._conn, self._pid = None, None, os.getpid()
                self._pending, self._draining = deque(), False
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agl-sqlite")
            return self._executor

    def storage_problem(self, exc: BaseException) -> Optional[str]:
        if not isinstance(exc, sqlite3.DatabaseError):
            return None
        name = getattr(exc, "sqlite_errorname", "")  # Python >= 3.11
        text = str(exc).lower()
        if name.startswith(_STORAGE_ERRORS) or any(marker in text for marker in _STORAGE_MESSAGES):
            return f"SQLite file {self.path!r} refuses writes: {exc}"
        return None

    def _connect(self) -> sqlite3.Connection:
        if self.path != ":memory:" and not self.path.startswith("file:"):
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
        conn = sqlite3.connect(
            self.path,
            timeout=0,  # lock waits are retried by _with_lock_retry, bounded by busy_timeout_seconds
            isolation_level=None,  # we issue BEGIN / COMMIT ourselves
            check_same_thread=True,
            uri=self.path.startswith("file:"),
        )
        try:
            self._with_lock_retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA temp_store = MEMORY")
            self._with_lock_retry(lambda: self._create_schema(conn))
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _create_schema(conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in schema_statements(SQLITE):
                conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _with_lock_retry(self, action: Callable[[], T]) -> T:
        """Run `action`, retrying while another connection holds the lock, for up to busy_timeout_seconds."""
        deadline = time.monotonic() + self.busy_timeout_seconds
        pause = _RETRY_FIRST_SLEEP
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() + pause > deadline:
                    raise sqlite3.OperationalError(
                        f"{exc} (waited {self.busy_timeout_seconds} s for {self.path!r}; another process holds "
                        "its write lock - raise busy_timeout_seconds if that is expected)"
                    ) from exc
                time.sleep(pause * random.uniform(0.5, 1.5))
                pause = min(pause * 2, _RETRY_MAX_SLEEP)

    def _run_on_thread(self, body: TransactionBody[T], write: bool) -> T:
        if self._conn is None:
            self._conn = self._connect()
        conn = self._conn

        def attempt() -> T:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                result = run_without_suspending(body(_SqliteTransaction(conn)))  # type: ignore[arg-type]
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        return self._with_lock_retry(attempt)

    async def run(self, body: TransactionBody[T], *, write: bool) -> T:
        executor = self._ensure_executor()
        if not write:
            return await asyncio.wrap_future(executor.submit(self._run_on_thread, body, False))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._guard:
            self._pending.append((body, _Reply(loop, future)))
            schedule = not self._draining
            self._draining = True
        if schedule:
            executor.submit(self._drain_writes)
        return await future

    # ---- group commit ----

    def _drain_writes(self) -> None:
        """On the thread: commit queued writes group by group until none is left."""
        while True:
            with self._guard:
                if not self._pending:
                    self._draining = False
                    return
                count = min(len(self._pending), self.group_commit_limit)
                group = [self._pending.popleft() for _ in range(count)]
            self._commit_group([(body, reply) for body, reply in group if reply.wanted()])

    def _commit_group(self, group: list[_PendingWrite]) -> None:
        """Run the calls in one transaction, each in a savepoint; answer them once COMMIT returned."""
        if not group:
            return
        outcomes: list[tuple[bool, Any]] = []
        try:
            if self._conn is None:
                self._conn = self._connect()
            conn = self._conn

            def attempt() -> bool:
                """Run the group in one transaction; False when it was a lone call that failed (rolled back)."""
                outcomes.clear()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if len(group) == 1:
                        # A lone call needs no savepoint: rolling the transaction back rolls back the call alone.
                        try:
                            result = run_without_suspending(group[0][0](_SqliteTransaction(conn)))  # type: ignore[arg-type]
                        except Exception as exc:
                            if conn.in_transaction:  # SQLite may have rolled it back itself (e.g. disk full)
                                conn.execute("ROLLBACK")
                            outcomes.append((False, exc))
                            return False
                        conn.execute("COMMIT")
                        outcomes.append((True, result))
                        return True
                    for body, _ in group:
                        conn.execute("SAVEPOINT agl_call")
                        try:
                            result = run_without_suspending(body(_SqliteTransaction(conn)))  # type: ignore[arg-type]
                        except Exception as exc:  # this call fails alone; the others in the group commit
                            if not conn.in_transaction:  # SQLite rolled the whole group back (e.g. disk full)
                                raise
                            conn.execute("ROLLBACK TO agl_call")
                            conn.execute("RELEASE agl_call")
                            outcomes.append((False, exc))
                        else:
                            conn.execute("RELEASE agl_call")
                            outcomes.append((True, result))
                    conn.execute("COMMIT")
                    return True
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise

            if self._with_lock_retry(attempt):
                self.write_transactions += 1
            self.write_calls += len(group)
        except BaseException as exc:  # nothing of the group was committed
            for _, reply in group:
                reply.send(False, exc)
            return
        for (_, reply), (ok, value) in zip(group, outcomes, strict=True):
            reply.send(ok, value)

    def _close_on_thread(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def close(self) -> None:
        with self._guard:
            executor, self._executor = self._executor, None
            owned = self._pid == os.getpid()
        if executor is None or not owned:
            return
        await asyncio.wrap_future(executor.submit(self._close_on_thread))
        executor.shutdown(wait=False)
