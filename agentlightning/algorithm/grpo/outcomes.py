"""What a finished (or given-up) rollout leaves for training: its latest attempt's triplets and reward,
its generated tokens per attempt, and whether it timed out and where.

A rollout timed out when its latest attempt was marked `timeout` by the store (its `timeout_seconds`
passed), or one of its spans carries `agentlightning.timeout.location` (an LLM call whose backend timed
out, or the exception span of an attempt that failed on a timeout). Its reward is then not a measurement:
GRPO discards its tokens as `timeout` instead of training on a filled-in reward.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...semconv import AGL_TIMEOUT_LOCATION
from ...store.base import LightningStore
from ...types import Attempt, Span
from .tokens import response_tokens

__all__ = ["RolloutOutcome", "rollout_outcome", "rollout_tokens", "timeout_location_of"]

Adapt = Callable[[Sequence[Span]], Tuple[List[Any], Optional[float]]]
"""Spans of one attempt -> (triplets, final reward when no triplet carries one)."""


@dataclass
class RolloutOutcome:
    rollout_id: str
    triplets: List[Any]
    """The latest attempt's triplets."""
    final_reward: Optional[float]
    tokens: int
    """Generated tokens of the latest attempt."""
    earlier: Dict[str, int] = field(default_factory=lambda: {})
    """Generated tokens of earlier attempts (retried), by discard reason ("failed" / "timeout")."""
    timeout_location: Optional[str] = None
    """Where the latest attempt timed out (`TIMEOUT_LOCATIONS`), None when it did not."""
    attempt_gave_up: bool = False
    """An attempt was marked timeout / unresponsive: its runner may still record (late) tokens."""

    @property
    def total_tokens(self) -> int:
        return self.tokens + sum(self.earlier.values())


def timeout_location_of(spans: Sequence[Span], attempt: Optional[Attempt]) -> Optional[str]:
    """Where an attempt timed out: the store's verdict ("rollout"), else the first span marking a timeout."""
    if attempt is not None and attempt.status == "timeout":
        return "rollout"
    for span in spans:
        location = (span.attributes or {}).get(AGL_TIMEOUT_LOCATION)
        if isinstance(location, str) and location:
            return location
    return None


def _by_attempt(spans: Sequence[Span]) -> Dict[str, List[Span]]:
    grouped: Dict[str, List[Span]] = {}
    for span in spans:
        grouped.setdefault(span.attempt_id, []).append(span)
    return grouped


async def rollout_outcome(store: LightningStore, rollout_id: str, adapt: Adapt) -> RolloutOutcome:
    """The rollout's outcome from all its spans and attempts (see the module docstring)."""
    spans = list(await store.query_spans(rollout_id))
    attempts = list(await store.query_attempts(rollout_id))
    grouped = _by_attempt(spans)
    latest = attempts[-1] if attempts else None
    latest_spans = grouped.pop(latest.attempt_id, []) if latest is not None else spans
    triplets, final_reward = adapt(latest_spans)
    outcome = RolloutOutcome(
        rollout_id,
        triplets,
        final_reward,
        response_tokens(triplets),
        timeout_location=timeout_location_of(latest_spans, latest),
        attempt_gave_up=any(a.status in ("timeout", "unresponsive") for a in attempts),
    )
    by_id = {a.attempt_id: a for a in attempts}
    for attempt_id, attempt_spans in grouped.items():
        reason = "timeout" if timeout_location_of(attempt_spans, by_id.get(attempt_id)) else "failed"
        tokens = response_tokens(adapt(attempt_spans)[0])
        outcome.earlier[reason] = outcome.earlier.get(reason, 0) + tokens
    return outcome


async def rollout_tokens(store: LightningStore, rollout_id: str, adapt: Adapt) -> int:
    """Generated tokens the rollout has recorded so far, all attempts together (for rollouts in flight)."""
    grouped = _by_attempt(list(await store.query_spans(rollout_id)))
    return sum(response_tokens(adapt(attempt_spans)[0]) for attempt_spans in grouped.values())
