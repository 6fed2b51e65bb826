"""`SqliteLightningStore`: a durable store in one SQLite file, shareable by processes on one machine.

Committed writes survive the process being killed (WAL journal, `synchronous=NORMAL`; pass
`synchronous="FULL"` to also survive OS crashes and power loss). Processes opening the same file
coordinate through SQLite's write lock, so a rollout is never dequeued twice. See
`agentlightning.store.sql.sqlite_engine` for the details.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

from .sql.sqlite_engine import SqliteEngine, SqliteSynchronous
from .sql.store import SqlLightningStore
from .utils import Clock

__all__ = ["SqliteLightningStore"]


class SqliteLightningStore(SqlLightningStore):
    """The LightningStore in a SQLite database file (created with its tables on first use).

    Args:
        path: database file; its directory is created if missing.
        scan_debounce_seconds: minimum time between watchdog scans (0 = scan before every call).
        clock: time source in seconds (tests inject a fake one); defaults to `time.time`.
        tracker: optional metrics backend for `agl.<group>.total/duration`.
        busy_timeout_seconds: how long a write waits for another process holding the write lock.
        synchronous: "NORMAL" (survives process kills) or "FULL" (also survives OS crashes; slower).
    """

    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        *,
        scan_debounce_seconds: float = 10.0,
        clock: Optional[Clock] = None,
        tracker: Any = None,
        busy_timeout_seconds: float = 30.0,
        synchronous: SqliteSynchronous = "NORMAL",
        group_commit_limit: int = 256,
    ) -> None:
        self.path = os.fspath(path)
        engine = SqliteEngine(
            self.path,
            busy_timeout_seconds=busy_timeout_seconds,
            synchronous=synchronous,
            group_commit_limit=group_commit_limit,
        )
        super().__init__(engine, scan_debounce_seconds=scan_debounce_seconds, clock=clock, tracker=tracker)
        self._init_kwargs: dict[str, Any] = {
            "scan_debounce_seconds": scan_debounce_seconds,
            "clock": clock,
            "tracker": tracker,
            "busy_timeout_seconds": busy_timeout_seconds,
            "synchronous": synchronous,
            "group_commit_limit": group_commit_limit,
        }

    def __reduce__(self) -> Any:
        # Another process opens its own connection to the same file (capability zero_copy).
        return (_reopen_sqlite, (self.path, self._init_kwargs))

    def __repr__(self) -> str:
        return f"SqliteLightningStore({self.path!r})"


def _reopen_sqlite(path: str, kwargs: dict[str, Any]) -> SqliteLightningStore:
    return SqliteLightningStore(path, **kwargs)
