"""What `Trainer.fit` prints when it ends: rollouts by status, failures by error, mean final reward per mode,
and where the store is.

A newcomer's first run should say whether anything happened; the same numbers are kept on
`Trainer.last_summary` for scripts.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from typing import Dict, List, Optional, Tuple, Union

from pydantic import BaseModel

from agentlightning.emitter.exception import find_failure
from agentlightning.emitter.reward import find_final_reward
from agentlightning.store.base import LightningStore
from agentlightning.types import TERMINAL_ROLLOUT_STATUSES, AttemptedRollout, Rollout, Span

__all__ = ["FitSummary", "ModeReward", "summarize_run", "describe_store", "MAX_REWARD_LOOKUPS"]

MAX_REWARD_LOOKUPS = 2000
"""Rewards are read (one span query each) for at most this many finished rollouts, the most recent first."""

_CONCURRENT_LOOKUPS = 16
_REWARD_SPAN_PREFIX = "agentlightning."  # reward spans, and the exception span of a failed attempt
_SHOWN_ERRORS = 3


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
    """Succeeded rollouts whose spans carry no reward."""
    failures: Dict[str, int] = {}
    """Failed rollouts (among those read) by error: `Type: message`, or how the attempt ended."""
    rewards_sampled: bool
    """True when more than `MAX_REWARD_LOOKUPS` rollouts finished and only the most recent were read."""
    store: str

    @property
    def succeeded(self) -> int:
        return self.rollouts_by_status.get("succeeded", 0)

    @property
    def failed(self) -> int:
        return self.rollouts_by_status.get("failed", 0)

    @property
    def all_failed(self) -> bool:
        """Rollouts ran, and every one of them failed."""
        total = sum(self.rollouts_by_status.values())
        return total > 0 and self.failed == total

    def failure_counts(self, limit: int = _SHOWN_ERRORS) -> str:
        """`3 x ValueError: boom; 1 x ...`: the most common errors first, at most `limit` of them."""
        ranked = sorted(self.failures.items(), key=lambda item: (-item[1], item[0]))
        text = "; ".join(f"{n} x {error}" for error, n in ranked[:limit])
        if len(ranked) > limit:
            text += f"; and {len(ranked) - limit} other errors"
        return text

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
        if self.failures:
            lines.append(f"  failed: {self.failure_counts()}")
        if self.without_reward:
            lines.append(
                f"  {self.without_reward} succeeded rollouts reported no reward (return a float or emit_reward)"
            )
        lines.append(f"  store: {self.store}")
        return "\n".join(lines)


def describe_store(store: LightningStore, served_at: Optional[str] = None) -> str:
    """Where the rollouts and spans of the run can be found afterwards.

    `served_at` is the URL of the store server the run started for `store` (gone once the run ends).
    """
    server_address = getattr(store, "server_address", None)
    if isinstance(server_address, str):  # a LightningStoreClient: the run went to a store server
        root = getattr(store, "server_root", server_address)
        return f"{type(store).__name__} to the store server at {root} (dashboard: {root}/)"
    path = getattr(store, "path", None)
    if isinstance(path, str):
        return f"{type(store).__name__} at {path} (browse it: agl store --backend sqlite --path {path})"
    if isinstance(getattr(store, "dsn", None), str):
        return f"{type(store).__name__} (browse it: agl store --backend postgres --dsn <dsn>)"
    endpoint = getattr(store, "endpoint", None)
    if isinstance(endpoint, str):
        return f"{type(store).__name__} at {endpoint}"
    served = f" served at {served_at} during the run" if served_at else ""
    return (
        f"{type(store).__name__}{served}, kept in this process only (to keep a run and watch it in the dashboard, "
        "start `agl store` first and set AGL_STORE_URL=http://127.0.0.1:4747, or pass "
        "store=agl.SqliteLightningStore(path))"
    )


def _failure_of(rollout: AttemptedRollout, spans: Sequence[Span]) -> str:
    """The error that failed the attempt, from its exception span; else how the attempt ended."""
    failure = find_failure(spans)
    if failure is not None:
        return failure
    if rollout.attempt.status != "failed":
        return f"attempt {rollout.attempt.status} (see RolloutConfig timeouts)"
    return "failed without an error recorded"


async def _outcome(store: LightningStore, rollout: Union[Rollout, AttemptedRollout]) -> Tuple[Optional[float], str]:
    """(final reward, failure) of a finished rollout; the failure is "" unless it failed."""
    if not isinstance(rollout, AttemptedRollout):
        return None, "failed before any attempt started" if rollout.status == "failed" else ""
    spans = list(
        await store.query_spans(rollout.rollout_id, rollout.attempt.attempt_id, name_contains=_REWARD_SPAN_PREFIX)
    )
    failure = _failure_of(rollout, spans) if rollout.status == "failed" else ""
    return find_final_reward(spans), failure


async def summarize_run(
    store: LightningStore,
    *,
    started_at: float,
    store_description: str,
    now: Optional[float] = None,
    rollout_ids: Optional[Sequence[str]] = None,
) -> FitSummary:
    """Summarize the run's rollouts: `rollout_ids` when known, else those started at or after `started_at`."""
    if rollout_ids:
        mine = list(
            await store.query_rollouts(rollout_id_in=list(rollout_ids), sort_by="start_time", sort_order="desc")
        )
    else:
        everything = await store.query_rollouts(sort_by="start_time", sort_order="desc")
        mine = [r for r in everything if r.start_time >= started_at]
    by_status = Counter(r.status for r in mine)
    finished = [r for r in mine if r.status in TERMINAL_ROLLOUT_STATUSES][:MAX_REWARD_LOOKUPS]
    semaphore = asyncio.Semaphore(_CONCURRENT_LOOKUPS)

    async def outcome_of(rollout: Union[Rollout, AttemptedRollout]) -> Tuple[Optional[float], str]:
        async with semaphore:
            return await _outcome(store, rollout)

    outcomes = await asyncio.gather(*(outcome_of(r) for r in finished))
    values = [value for value, _ in outcomes]
    failures = Counter(failure for _, failure in outcomes if failure)
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
        without_reward=sum(1 for r, v in zip(finished, values, strict=True) if v is None and r.status == "succeeded"),
        failures=dict(failures),
        rewards_sampled=n_finished > len(finished),
        store=store_description,
    )
