"""Training curves for the dashboard: the final reward of each finished rollout, and finishing throughput.

Both read the most recently finished rollouts (by end time), through `FinishedRollouts` when given so a
refresh only reads what finished since; rewards come from `FinalRewards`, which reads each finished
rollout's spans once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional, Union

from pydantic import BaseModel

from agentlightning.store.base import LightningStore
from agentlightning.store.utils import check_mode
from agentlightning.types import TERMINAL_ROLLOUT_STATUSES, AttemptedRollout, Rollout

from .finished import FinishedRollouts
from .rewards import FinalRewards
from .summaries import run_of

__all__ = [
    "MAX_SERIES_POINTS",
    "RewardPoint",
    "RewardSeries",
    "ValidationRound",
    "validation_rounds",
    "ThroughputBucket",
    "Throughput",
    "finished_rollouts",
    "reward_series",
    "throughput",
    "pick_bucket_seconds",
]

MAX_SERIES_POINTS = 20_000
MIN_BUCKET_SECONDS = 0.001  # finish times are seconds since the epoch: finer buckets overflow, and mean nothing
_TERMINAL = sorted(TERMINAL_ROLLOUT_STATUSES)
_NICE_BUCKETS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


class RewardPoint(BaseModel):
    """One finished rollout on the reward curve."""

    rollout_id: str
    mode: Optional[str]
    status: str
    resources_id: Optional[str]
    start_time: float
    end_time: float
    final_reward: Optional[float]
    run: Optional[str] = None
    """The `fit`/`dev` run that created the rollout; several runs can share one store."""


class ValidationRound(BaseModel):
    """Val rollouts that finished together: no train rollout finished between them, same resources and run."""

    run: Optional[str] = None
    resources_id: Optional[str]
    first_end_time: float
    last_end_time: float
    count: int
    rewarded: int
    mean_reward: Optional[float]


class RewardSeries(BaseModel):
    """Finished rollouts in the order they finished (oldest first); `total` counts all finished matches."""

    items: list[RewardPoint]
    total: int
    val_rounds: list[ValidationRound] = []
    """Validation rounds among `items`, oldest first: compare the first and the last, never pool them."""


def validation_rounds(points: Sequence[RewardPoint]) -> list[ValidationRound]:
    """Split val points (in finishing order) into rounds: a finished train rollout of the same run, new
    resources or another run starts one.

    Algorithms validate before training, between steps and at the end; a mean over all val rollouts would
    blend the "before" score into the "after" one.
    """
    rounds: list[list[RewardPoint]] = []
    current: dict[Optional[str], list[RewardPoint]] = {}  # the open round of each run
    for point in points:
        if point.mode == "train":
            current.pop(point.run, None)
        if point.mode != "val":
            continue
        members = current.get(point.run)
        if members is None or members[0].resources_id != point.resources_id:
            members = current[point.run] = []
            rounds.append(members)
        members.append(point)
    result: list[ValidationRound] = []
    for members in rounds:
        rewards = [p.final_reward for p in members if p.final_reward is not None]
        result.append(
            ValidationRound(
                run=members[0].run,
                resources_id=members[0].resources_id,
                first_end_time=members[0].end_time,
                last_end_time=members[-1].end_time,
                count=len(members),
                rewarded=len(rewards),
                mean_reward=sum(rewards) / len(rewards) if rewards else None,
            )
        )
    return result


class ThroughputBucket(BaseModel):
    """Rollouts that finished in `[start, start + bucket_seconds)`, by final status."""

    start: float
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0


class Throughput(BaseModel):
    bucket_seconds: float
    buckets: list[ThroughputBucket]
    total: int
    """Finished rollouts counted (at most the `limit` most recent)."""


def _check_limit(limit: int) -> None:
    if limit < 1 or limit > MAX_SERIES_POINTS:
        raise ValueError(f"limit must be between 1 and {MAX_SERIES_POINTS}, got {limit}")


async def finished_rollouts(
    store: LightningStore,
    *,
    mode_in: Optional[Sequence[str]] = None,
    limit: int = 2000,
    cache: Optional[FinishedRollouts] = None,
) -> tuple[list[Union[Rollout, AttemptedRollout]], int]:
    """The `limit` most recently finished rollouts (oldest first) of the given modes, and how many match."""
    _check_limit(limit)
    for mode in mode_in or []:
        check_mode(mode)
    if cache is not None and not mode_in:
        newest, total = await cache.newest(store, limit)
        return newest[::-1], total
    if mode_in:
        # The store cannot filter by mode: read every finished rollout, newest first, and keep the wanted modes.
        everything = await store.query_rollouts(status_in=_TERMINAL, sort_by="end_time", sort_order="desc")  # type: ignore[arg-type]
        matching = [r for r in everything if r.mode in mode_in]
        newest, total = matching[:limit], len(matching)
    else:
        page = await store.query_rollouts(
            status_in=_TERMINAL,  # type: ignore[arg-type]
            sort_by="end_time",
            sort_order="desc",
            limit=limit,
        )
        newest, total = list(page), page.total
    newest.reverse()
    return newest, total


async def reward_series(
    store: LightningStore,
    rewards: FinalRewards,
    *,
    mode_in: Optional[Sequence[str]] = None,
    limit: int = 2000,
    cache: Optional[FinishedRollouts] = None,
) -> RewardSeries:
    """Final rewards of the `limit` most recently finished rollouts, oldest first."""
    rollouts, total = await finished_rollouts(store, mode_in=mode_in, limit=limit, cache=cache)
    values = await rewards.of_many(store, rollouts)
    points = [
        RewardPoint(
            rollout_id=r.rollout_id,
            mode=r.mode,
            status=r.status,
            resources_id=r.resources_id,
            start_time=r.start_time,
            end_time=r.end_time if r.end_time is not None else r.start_time,
            final_reward=value,
            run=run_of(r),
        )
        for r, value in zip(rollouts, values, strict=True)
    ]
    return RewardSeries(items=points, total=total, val_rounds=validation_rounds(points))


def pick_bucket_seconds(span_seconds: float, max_buckets: int = 60) -> float:
    """The smallest round bucket size (1 s, 2 s, 5 s, ... 1 day) giving at most `max_buckets` buckets."""
    for size in _NICE_BUCKETS:
        if span_seconds / size <= max_buckets:
            return float(size)
    return float(math.ceil(span_seconds / max_buckets / 86400) * 86400)


async def throughput(
    store: LightningStore,
    *,
    mode_in: Optional[Sequence[str]] = None,
    bucket_seconds: Optional[float] = None,
    limit: int = 2000,
    cache: Optional[FinishedRollouts] = None,
) -> Throughput:
    """Finished rollouts per time bucket, from the oldest to the newest of the `limit` most recent.

    Without `bucket_seconds`, a round size is picked so the range fits in about 60 buckets; a size too
    small for the range is raised to the smallest that gives at most `MAX_SERIES_POINTS` buckets, and
    never below `MIN_BUCKET_SECONDS`.
    """
    if bucket_seconds is not None and not bucket_seconds > 0:
        raise ValueError(f"bucket_seconds must be > 0, got {bucket_seconds}")
    rollouts, _ = await finished_rollouts(store, mode_in=mode_in, limit=limit, cache=cache)
    ends = [r.end_time if r.end_time is not None else r.start_time for r in rollouts]
    if not rollouts:
        return Throughput(bucket_seconds=bucket_seconds or 60.0, buckets=[], total=0)
    first, last = min(ends), max(ends)
    fitting = (last - first) / (MAX_SERIES_POINTS - 2)
    size = max(bucket_seconds or pick_bucket_seconds(last - first), fitting, MIN_BUCKET_SECONDS)
    origin = math.floor(first / size) * size
    n_buckets = int((last - origin) // size) + 1
    buckets = [ThroughputBucket(start=origin + i * size) for i in range(n_buckets)]
    for rollout, end in zip(rollouts, ends, strict=True):
        bucket = buckets[int((end - origin) // size)]
        setattr(bucket, rollout.status, getattr(bucket, rollout.status) + 1)
    return Throughput(bucket_seconds=size, buckets=buckets, total=len(rollouts))
