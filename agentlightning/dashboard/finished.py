"""The most recently finished rollouts, read once and then topped up with those that finished since.

The training page asks for the latest few thousand finished rollouts every few seconds. Reading them all
each time costs the store a large query; instead one small query (the newest finished rollout and the
count of finished ones) tells whether anything changed, and only the newly finished rollouts are read.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional, Union

from agentlightning.store.base import LightningStore
from agentlightning.types import TERMINAL_ROLLOUT_STATUSES, AttemptedRollout, Rollout

__all__ = ["FinishedRollouts"]

_TERMINAL = sorted(TERMINAL_ROLLOUT_STATUSES)
AnyRollout = Union[Rollout, AttemptedRollout]


def _end(rollout: AnyRollout) -> float:
    return rollout.end_time if rollout.end_time is not None else rollout.start_time


class FinishedRollouts:
    """Cache of the newest finished rollouts (by end time).

    Args:
        full_reload_seconds: re-read everything at least this often, so edits to finished rollouts and
            rollouts that finished with an unusually old end time show up.
        slack: extra rollouts read on a top-up, for rollouts finishing with nearly equal end times.
        clock: monotonic time source (tests inject one).
    """

    def __init__(
        self, *, full_reload_seconds: float = 60.0, slack: int = 16, clock: Optional[Callable[[], float]] = None
    ) -> None:
        self.full_reload_seconds = full_reload_seconds
        self.slack = slack
        self._clock = clock or time.monotonic
        self._items: list[AnyRollout] = []  # newest first
        self._capacity = 0
        self._total = -1
        self._newest_id: Optional[str] = None
        self._loaded_at = -math.inf
        self.full_loads = 0
        self.top_ups = 0

    async def newest(self, store: LightningStore, limit: int) -> tuple[list[AnyRollout], int]:
        """The `limit` most recently finished rollouts, newest first, and how many rollouts have finished."""
        head = await store.query_rollouts(status_in=_TERMINAL, sort_by="end_time", sort_order="desc", limit=1)  # type: ignore[arg-type]
        total, newest_id = head.total, (head.items[0].rollout_id if head.items else None)
        fresh = self._clock() - self._loaded_at < self.full_reload_seconds
        if fresh and limit <= self._capacity:
            if total == self._total and newest_id == self._newest_id:
                return self._items[:limit], total
            grown = total - self._total
            if 0 < grown <= self._capacity:
                await self._top_up(store, grown)
                self._total, self._newest_id = total, newest_id
                return self._items[:limit], total
        await self._load(store, limit)
        return self._items[:limit], self._total

    async def _top_up(self, store: LightningStore, grown: int) -> None:
        page = await store.query_rollouts(
            status_in=_TERMINAL,  # type: ignore[arg-type]
            sort_by="end_time",
            sort_order="desc",
            limit=grown + self.slack,
        )
        merged = {r.rollout_id: r for r in self._items}
        merged.update((r.rollout_id, r) for r in page)  # fresher copies win
        self._items = sorted(merged.values(), key=_end, reverse=True)[: self._capacity]
        self.top_ups += 1

    async def _load(self, store: LightningStore, limit: int) -> None:
        page = await store.query_rollouts(
            status_in=_TERMINAL,  # type: ignore[arg-type]
            sort_by="end_time",
            sort_order="desc",
            limit=limit,
        )
        self._items = list(page)
        self._capacity = limit
        self._total = page.total
        self._newest_id = self._items[0].rollout_id if self._items else None
        self._loaded_at = self._clock()
        self.full_loads += 1
