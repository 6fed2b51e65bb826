"""What `Trainer.fit` prints when it ends: rollouts by status, mean final reward per mode, and where the store is.

A newcomer's first run should say whether anything happened; the same numbers are kept on
`Trainer.last_summary` for scripts.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Dict, List, Optional, Union

from pydantic import BaseModel

from agentlightning.emitter.reward import find_final_reward
from agentlightning.store.base import LightningStore
from agentlightning.types import TERMINAL_ROLLOUT_STATUSES, AttemptedRollout, Rollout

__all__ = ["FitSummary", "ModeReward", "summarize_run", "describe_store", "MAX_REWARD_LOOKUPS"]

MAX_REWARD_LOOKUPS = 2000
"""Rewards are read (one span query each) for at most this many finished rollouts, the most recent first."""

_CONCURRENT_LOOKUPS = 16
_REWARD_SPAN_PREFIX = "agentlightning."


class ModeReward(BaseModel):
    """Mean final reward of the finished rollouts of one mode that reported a reward."""

    mode: str
    mean: float
    count: int


class FitSummary(BaseModel):
    """The outcome of one `fit`/`dev` call, counted over the rollouts it started."""

    seconds: float
    rollouts_by_status: Dict[str, int]
    rewards: List[ModeReward]
    without_reward: int
    """Finished rollouts whose spans carry no reward."""
    rewards_sampled: bool
    """True when more than `MAX_REWARD_LOOKUPS` rollouts finished and only the most recent were read."""
    store: str

    @property
    def succeeded(self) -> int:
        return self.rollouts_by_status.get("succeeded", 0)

    @property
    def failed(self) -> int:
        return self.rollouts_by_status.get("failed", 0)

    def render(self) -> str:
        """A few plain lines for the console."""
        total = sum(self.rollouts_by_status.values())
        others = sorted((s, n) for s, n in self.rollouts_by_status.items() if s not in ("succeeded", "failed") and n)
        counts = f"{self.succeeded} succeeded, {self.failed} failed" + "".join(f", {n} {s}" for s, n in others)
        lines = [f"agentlightning: finished in {self.seconds:.1f} s; {total} rollouts: {counts}"]
        if self.rewards:
            parts = [f"{r.mode} {r.mean:.3f} ({r.count} rollouts)" for r in self.rewards]
            sampled = f" over the latest {MAX_REWARD_LOOKUPS}" if self.rewards_sampled else ""
            lines.append(f"  mean reward{sampled}: " + ", ".join(parts))
        if self.without_reward:
            lines.append(
                f"  {self.without_reward} finished rollouts reported no reward (return a float or emit_reward)"
            )
        lines.append(f"  store: {self.store}")
        return "\n".join(lines)


def describe_store(store: LightningStore) -> str:
    """Where the rollouts and spans of the run can be found afterwards."""
    path = getattr(store, "path", None)
    if isinstance(path, str):
        return f"{type(store).__name__} at {path} (browse it: agl store --backend sqlite --path {path})"
    if isinstance(getattr(store, "dsn", None), str):
        return f"{type(store).__name__} (browse it: agl store --backend postgres --dsn <dsn>)"
    endpoint = getattr(store, "endpoint", None)
    if isinstance(endpoint, str):
        return f"{type(store).__name__} at {endpoint}"
    return (
        f"{type(store).__name__}, kept in this process only (pass store=agl.SqliteLightningStore(path) to keep it "
        "and browse it with the dashboard)"
    )


async def _final_reward(store: LightningStore, rollout: Union[Rollout, AttemptedRollout]) -> Optional[float]:
    if not isinstance(rollout, AttemptedRollout):
        return None
    spans = await store.query_spans(rollout.rollout_id, rollout.attempt.attempt_id, name_contains=_REWARD_SPAN_PREFIX)
    return find_final_reward(spans)


async def summarize_run(
    store: LightningStore, *, started_at: float, store_description: str, now: Optional[float] = None
) -> FitSummary:
    """Summarize the rollouts that started at or after `started_at` (the rollouts of this run)."""
    everything = await store.query_rollouts(sort_by="start_time", sort_order="desc")
    mine = [r for r in everything if r.start_time >= started_at]
    by_status = Counter(r.status for r in mine)
    finished = [r for r in mine if r.status in TERMINAL_ROLLOUT_STATUSES][:MAX_REWARD_LOOKUPS]
    semaphore = asyncio.Semaphore(_CONCURRENT_LOOKUPS)

    async def reward_of(rollout: Union[Rollout, AttemptedRollout]) -> Optional[float]:
        async with semaphore:
            return await _final_reward(store, rollout)

    values = await asyncio.gather(*(reward_of(r) for r in finished))
    sums: Dict[str, list[float]] = {}
    for rollout, value in zip(finished, values, strict=True):
        if value is not None:
            sums.setdefault(rollout.mode or "unset", []).append(value)
    order = {"train": 0, "val": 1, "test": 2}
    rewards = [
        ModeReward(mode=mode, mean=sum(v) / len(v), count=len(v))
        for mode, v in sorted(sums.items(), key=lambda item: (order.get(item[0], 3), item[0]))
    ]
    n_finished = sum(n for s, n in by_status.items() if s in TERMINAL_ROLLOUT_STATUSES)
    return FitSummary(
        seconds=(time.time() if now is None else now) - started_at,
        rollouts_by_status=dict(by_status),
        rewards=rewards,
        without_reward=sum(1 for v in values if v is None),
        rewards_sampled=n_finished > len(finished),
        store=store_description,
    )
