"""Worker liveness for the dashboard: a busy or idle worker that stopped sending heartbeats is offline.

The store keeps each worker's last reported status forever; after a run ends its runners still read
"idle". Runners heartbeat every 10 s by default, so a minute of silence means the process is gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from agentlightning.types.core import Worker

__all__ = ["OFFLINE_AFTER_SECONDS", "last_seen", "is_offline", "split_offline"]

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
