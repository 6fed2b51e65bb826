"""Worker liveness for the dashboard: a busy or idle worker that stopped sending heartbeats is offline.

The store keeps each worker's last reported status forever; after a run ends its runners still read
"idle". Runners heartbeat every 10 s by default, so a minute of silence means the process is gone. The
workers page filters and counts by the status it shows (busy, idle, offline, unknown), never by the
stored one, so a chip and the rows under it always agree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Optional

from pydantic import BaseModel

from agentlightning.store.base import LightningStore, SortOrder
from agentlightning.store.utils import check_pagination, check_sort, paginate
from agentlightning.types.core import Worker

__all__ = [
    "OFFLINE_AFTER_SECONDS",
    "SHOWN_WORKER_STATUSES",
    "WorkerRow",
    "WorkerPage",
    "last_seen",
    "is_offline",
    "shown_status",
    "split_offline",
    "worker_page",
]

SHOWN_WORKER_STATUSES = ("busy", "idle", "offline", "unknown")

OFFLINE_AFTER_SECONDS = 60.0


def last_seen(worker: Worker) -> Optional[float]:
    """The latest time the store heard from the worker (heartbeat, dequeue, or a status change)."""
    times = [
        t
        for t in (worker.last_heartbeat_time, worker.last_dequeue_time, worker.last_busy_time, worker.last_idle_time)
        if t is not None
    ]
    return max(times) if times else None


def is_offline(worker: Worker, now: float, after_seconds: float = OFFLINE_AFTER_SECONDS) -> bool:
    seen = last_seen(worker)
    return seen is not None and now - seen > after_seconds


def split_offline(workers: Iterable[Worker], now: float) -> tuple[dict[str, int], int]:
    """(live busy/idle counts, number of offline workers) among busy and idle workers."""
    live = {"busy": 0, "idle": 0}
    offline = 0
    for worker in workers:
        if is_offline(worker, now):
            offline += 1
        elif worker.status in live:
            live[worker.status] += 1
    return live, offline


def shown_status(worker: Worker, now: float) -> str:
    """busy / idle while the worker is heard from, offline once silent, unknown as the store says."""
    if worker.status in ("busy", "idle") and is_offline(worker, now):
        return "offline"
    return worker.status


class WorkerRow(Worker):
    """A worker with the status the dashboard shows for it."""

    shown_status: str


class WorkerPage(BaseModel):
    items: list[WorkerRow]
    limit: int
    offset: int
    total: int
    status_counts: dict[str, int]
    """Every worker counted by shown status (the filter chips)."""


async def worker_page(
    store: LightningStore,
    now: float,
    *,
    status_in: Optional[Sequence[str]] = None,
    sort_by: Optional[str] = "worker_id",
    sort_order: SortOrder = "asc",
    limit: int = 20,
    offset: int = 0,
) -> WorkerPage:
    """One page of workers filtered by shown status (the store holds few workers: all are read)."""
    check_pagination(limit, offset)
    check_sort("worker", sort_by, sort_order)
    for status in status_in or []:
        if status not in SHOWN_WORKER_STATUSES:
            raise ValueError(f"unknown worker status {status!r}; use one of {', '.join(SHOWN_WORKER_STATUSES)}")
    rows = [
        WorkerRow(**worker.model_dump(), shown_status=shown_status(worker, now))
        for worker in await store.query_workers(sort_by=sort_by, sort_order=sort_order)
    ]
    counts = Counter(row.shown_status for row in rows)
    matching = [row for row in rows if not status_in or row.shown_status in status_in]
    return WorkerPage(
        items=paginate(matching, limit, offset),
        limit=limit,
        offset=offset,
        total=len(matching),
        status_counts={status: counts.get(status, 0) for status in SHOWN_WORKER_STATUSES},
    )
