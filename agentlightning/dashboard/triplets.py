"""What a trainer would extract from one attempt: its triplets and the adapter's report of what it left out."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from pydantic import BaseModel

from agentlightning.adapter import AdaptationReport, TracerTraceToTriplet
from agentlightning.emitter.reward import find_final_reward
from agentlightning.store.base import LightningStore
from agentlightning.types import Span, Triplet

__all__ = ["AttemptTriplets", "NoSuchAttempt", "attempt_triplets"]


class NoSuchAttempt(LookupError):
    """The rollout, or the attempt asked for, does not exist."""


class AttemptTriplets(BaseModel):
    """Triplets of one attempt as `TracerTraceToTriplet` extracts them, with its drop report."""

    rollout_id: str
    attempt_id: str
    adapter: str
    final_reward: Optional[float]
    """Primary reward of the attempt's last reward span (what the runner logs as the final reward)."""
    triplets: list[Triplet]
    report: AdaptationReport


async def _resolve_attempt(store: LightningStore, rollout_id: str, attempt_id: Optional[str]) -> str:
    if await store.get_rollout_by_id(rollout_id) is None:
        raise NoSuchAttempt(f"rollout {rollout_id!r} not found")
    if attempt_id is None or attempt_id == "latest":
        latest = await store.get_latest_attempt(rollout_id)
        if latest is None:
            raise NoSuchAttempt(f"rollout {rollout_id!r} has no attempt yet (it has not been dequeued)")
        return latest.attempt_id
    if not any(a.attempt_id == attempt_id for a in await store.query_attempts(rollout_id)):
        raise NoSuchAttempt(f"attempt {attempt_id!r} not found in rollout {rollout_id!r}; omit it for the latest")
    return attempt_id


async def attempt_triplets(
    store: LightningStore, rollout_id: str, attempt_id: Optional[str] = None, adapter: Any = None
) -> AttemptTriplets:
    """Triplets and report for an attempt (`attempt_id` None or "latest" means the latest attempt).

    Raises:
        NoSuchAttempt: when the rollout or attempt does not exist.
    """
    resolved = await _resolve_attempt(store, rollout_id, attempt_id)
    spans: list[Span] = list(await store.query_spans(rollout_id, resolved))
    converter = adapter if adapter is not None else TracerTraceToTriplet()
    # Adapting a long trace is CPU work; a worker thread keeps the server's event loop answering runners.
    triplets, report = await asyncio.to_thread(converter.adapt_with_report, spans)
    return AttemptTriplets(
        rollout_id=rollout_id,
        attempt_id=resolved,
        adapter=type(converter).__name__,
        final_reward=find_final_reward(spans),
        triplets=triplets,
        report=report,
    )
