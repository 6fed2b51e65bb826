"""Rollout rows for the dashboard: one page of rollouts with attempt count, duration and final reward.

The browser asks for one page and gets every column it shows, so a refresh costs one request instead of
one per row. Inputs are shortened to a preview: a table row never needs a whole task.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Optional, Union

from pydantic import BaseModel

from agentlightning.semconv import AGL_RUN
from agentlightning.store.base import LightningStore, SortOrder
from agentlightning.store.utils import check_mode, check_pagination, check_rollout_status, check_sort, paginate
from agentlightning.types import ROLLOUT_STATUSES, Attempt, AttemptedRollout, Rollout

from .rewards import FinalRewards

__all__ = [
    "INPUT_PREVIEW_CHARS",
    "RolloutSummary",
    "RolloutSummaryPage",
    "failure_of",
    "input_preview",
    "run_names",
    "run_of",
    "summarize_rollouts",
]

INPUT_PREVIEW_CHARS = 160


class RolloutSummary(BaseModel):
    """One row of the rollouts table."""

    rollout_id: str
    status: str
    mode: Optional[str]
    resources_id: Optional[str]
    start_time: float
    end_time: Optional[float]
    duration: Optional[float]
    """Seconds its attempts ran, from the first attempt's start to the end (the wait in the queue before it
    excluded); None while the rollout has not ended."""
    queue_wait: Optional[float] = None
    """Seconds from enqueue to the first attempt's start; None before it starts (or when only a later
    attempt is known, see `run_started`)."""
    run_started: Optional[float] = None
    """When its first attempt started (the latest attempt's start when a retry followed and only that one is
    at hand); None while it waits in the queue."""
    n_attempts: int
    final_reward: Optional[float]
    input_preview: str
    latest_attempt: Optional[Attempt]
    error: Optional[str] = None
    """Why a failed rollout failed: the error its latest attempt recorded, or how that attempt ended."""
    run: Optional[str] = None
    """The `fit`/`dev` run that created the rollout (`metadata["agl_run"]`), when a Trainer did."""


class RolloutSummaryPage(BaseModel):
    """A page of rollout rows; `total` counts every match, `status_counts` every rollout by status."""

    items: list[RolloutSummary]
    limit: int
    offset: int
    total: int
    status_counts: dict[str, int]
    runs: list[str] = []
    """Every run name among the store's rollouts, the most recently started first (the run filter's options)."""


def input_preview(value: Any, limit: int = INPUT_PREVIEW_CHARS) -> str:
    """A one-line text of a task input, cut to `limit` characters."""
    if isinstance(value, str):
        text = " ".join(value.split())
    else:
        text = json.dumps(value, default=str, ensure_ascii=False)  # already one line
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def run_of(rollout: Rollout) -> Optional[str]:
    """The run name a Trainer tagged the rollout with, if any."""
    run = (rollout.metadata or {}).get(AGL_RUN)
    return run if isinstance(run, str) else None


def run_start(rollout: Union[Rollout, AttemptedRollout]) -> tuple[Optional[float], Optional[float]]:
    """`(when its attempts began, seconds it waited in the queue before)`; the wait is known when the attempt
    at hand is the first one (sequence id 1), else the latest attempt's start stands in, with no wait."""
    if not isinstance(rollout, AttemptedRollout) or rollout.attempt.start_time is None:
        return None, None
    start = float(rollout.attempt.start_time)
    if rollout.attempt.sequence_id == 1:
        return start, max(0.0, start - rollout.start_time)
    return start, None


def failure_of(rollout: Union[Rollout, AttemptedRollout], rewards: FinalRewards) -> Optional[str]:
    """Why a failed rollout failed (None for any other status)."""
    if rollout.status != "failed":
        return None
    recorded = rewards.failure(rollout)
    if recorded is not None:
        return recorded
    if isinstance(rollout, AttemptedRollout) and rollout.attempt.status in ("timeout", "unresponsive"):
        return f"attempt {rollout.attempt.status}"
    return "no error recorded"


def _summary(
    rollout: Union[Rollout, AttemptedRollout], reward: Optional[float], rewards: FinalRewards
) -> RolloutSummary:
    attempt = rollout.attempt if isinstance(rollout, AttemptedRollout) else None
    started, queue_wait = run_start(rollout)
    began = started if started is not None else rollout.start_time
    duration = max(0.0, rollout.end_time - began) if rollout.end_time is not None else None
    return RolloutSummary(
        rollout_id=rollout.rollout_id,
        status=rollout.status,
        mode=rollout.mode,
        resources_id=rollout.resources_id,
        start_time=rollout.start_time,
        end_time=rollout.end_time,
        duration=duration,
        queue_wait=queue_wait,
        run_started=started,
        # Attempt sequence ids run 1..n, so the latest attempt's id is the attempt count.
        n_attempts=attempt.sequence_id if attempt is not None else 0,
        final_reward=reward,
        input_preview=input_preview(rollout.input),
        latest_attempt=attempt,
        error=failure_of(rollout, rewards),
        run=run_of(rollout),
    )


async def status_counts(store: LightningStore) -> dict[str, int]:
    """Number of rollouts in each status (one counting query per status)."""
    counts: dict[str, int] = {}
    for status in ROLLOUT_STATUSES:
        page = await store.query_rollouts(status_in=[status], limit=1)  # type: ignore[list-item]
        counts[status] = page.total
    return counts


async def summarize_rollouts(
    store: LightningStore,
    rewards: FinalRewards,
    *,
    status_in: Optional[Sequence[str]] = None,
    mode_in: Optional[Sequence[str]] = None,
    rollout_id_contains: Optional[str] = None,
    sort_by: Optional[str] = "start_time",
    sort_order: SortOrder = "desc",
    limit: int = 20,
    offset: int = 0,
    run_in: Optional[Sequence[str]] = None,
) -> RolloutSummaryPage:
    """One page of rollout rows filtered by status, mode, run and id substring.

    Status and id filters run in the store. The store contract has no mode or run filter, so with
    `mode_in` or `run_in` the matching rollouts are read in full and filtered here before paging
    (`""` in `run_in` stands for rollouts no run tagged).
    """
    check_pagination(limit, offset)
    check_sort("rollout", sort_by, sort_order)
    for status in status_in or []:
        check_rollout_status(status)
    for mode in mode_in or []:
        check_mode(mode)
    statuses = list(status_in) if status_in else None
    if mode_in or run_in:
        everything = await store.query_rollouts(
            status_in=statuses,  # type: ignore[arg-type]
            rollout_id_contains=rollout_id_contains,
            sort_by=sort_by,
            sort_order=sort_order,
        )
        matching = [
            r for r in everything if (not mode_in or r.mode in mode_in) and (not run_in or (run_of(r) or "") in run_in)
        ]
        total = len(matching)
        rollouts = paginate(matching, limit, offset)
    else:
        page = await store.query_rollouts(
            status_in=statuses,  # type: ignore[arg-type]
            rollout_id_contains=rollout_id_contains,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        )
        total = page.total
        rollouts = list(page)
    final_rewards = await rewards.of_many(store, rollouts)
    return RolloutSummaryPage(
        items=[_summary(r, reward, rewards) for r, reward in zip(rollouts, final_rewards, strict=True)],
        limit=limit,
        offset=offset,
        total=total,
        status_counts=await status_counts(store),
        runs=await run_names(store),
    )


async def run_names(store: LightningStore) -> list[str]:
    """The run names among the store's rollouts, the most recently started run first."""
    started: dict[str, float] = {}
    for rollout in await store.query_rollouts():
        run = run_of(rollout)
        if run is not None:
            started[run] = max(started.get(run, rollout.start_time), rollout.start_time)
    return sorted(started, key=lambda run: -started[run])
