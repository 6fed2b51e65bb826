"""Final reward of a rollout, read from its latest attempt's reward spans and remembered once it is final;
the error that failed it comes from the same spans.

The dashboard shows a reward per rollout in every table and chart; reading spans for each one on every
refresh would cost one span query per row per poll. A finished rollout's reward no longer changes, so
it is computed once and cached under a fingerprint of the attempt it came from.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from typing import Optional, Union

from agentlightning.emitter.exception import find_failure
from agentlightning.emitter.reward import find_final_reward
from agentlightning.store.base import LightningStore
from agentlightning.types import AttemptedRollout, Rollout

__all__ = ["REWARD_SPAN_NAME_PREFIX", "FinalRewards"]

REWARD_SPAN_NAME_PREFIX = "agentlightning."
"""Reward spans are `agentlightning.annotation` (emit_reward) or legacy `agentlightning.reward`; filtering on
this prefix lets the store skip LLM and agent spans, which are most of a trace."""

_Fingerprint = tuple[str, str, Optional[float], str]


def _fingerprint(rollout: AttemptedRollout) -> _Fingerprint:
    attempt = rollout.attempt
    return (attempt.attempt_id, attempt.status, attempt.end_time, rollout.status)


class FinalRewards:
    """Looks up final rewards (the last reward span of the latest attempt), caching finished rollouts.

    Args:
        max_entries: cached rollouts kept (least recently used are forgotten first).
        concurrency: span queries run at once when a page needs several rewards.
    """

    def __init__(self, max_entries: int = 200_000, concurrency: int = 8) -> None:
        if max_entries < 1 or concurrency < 1:
            raise ValueError(f"max_entries and concurrency must be >= 1, got {max_entries} and {concurrency}")
        self.max_entries = max_entries
        self.concurrency = concurrency
        self._cache: OrderedDict[str, tuple[_Fingerprint, Optional[float]]] = OrderedDict()
        self._failures: dict[str, tuple[_Fingerprint, str]] = {}  # failed rollouts only, kept with the cache
        self.span_queries = 0
        """Span queries issued so far (tests use it to check that finished rollouts are not re-read)."""

    def cached(self, rollout: Union[Rollout, AttemptedRollout]) -> tuple[bool, Optional[float]]:
        """(True, reward) when the reward is known without reading spans, else (False, None)."""
        if not isinstance(rollout, AttemptedRollout):
            return True, None
        cached = self._cache.get(rollout.rollout_id)
        if cached is not None and cached[0] == _fingerprint(rollout):
            self._cache.move_to_end(rollout.rollout_id)
            return True, cached[1]
        return False, None

    async def of(self, store: LightningStore, rollout: Union[Rollout, AttemptedRollout]) -> Optional[float]:
        """The final reward of one rollout (None when it has no attempt or no reward span)."""
        known, reward = self.cached(rollout)
        if known or not isinstance(rollout, AttemptedRollout):
            return reward
        fingerprint = _fingerprint(rollout)
        self.span_queries += 1
        spans = await store.query_spans(
            rollout.rollout_id, rollout.attempt.attempt_id, name_contains=REWARD_SPAN_NAME_PREFIX
        )
        reward = find_final_reward(spans)
        if rollout.is_terminal():
            self._remember(rollout.rollout_id, fingerprint, reward)
            failure = find_failure(spans) if rollout.status == "failed" else None
            if failure is not None:
                self._failures[rollout.rollout_id] = (fingerprint, failure)
        return reward

    def failure(self, rollout: Union[Rollout, AttemptedRollout]) -> Optional[str]:
        """The error that failed `rollout`, once `of` has read its spans (None if it recorded none)."""
        if not isinstance(rollout, AttemptedRollout):
            return None
        known = self._failures.get(rollout.rollout_id)
        return known[1] if known is not None and known[0] == _fingerprint(rollout) else None

    async def of_many(
        self, store: LightningStore, rollouts: Sequence[Union[Rollout, AttemptedRollout]]
    ) -> list[Optional[float]]:
        """Final rewards of several rollouts, in order, with at most `concurrency` span queries in flight."""
        looked_up = [self.cached(rollout) for rollout in rollouts]
        missing = [i for i, (known, _) in enumerate(looked_up) if not known]
        values = [reward for _, reward in looked_up]
        gate = asyncio.Semaphore(self.concurrency)

        async def one(index: int) -> None:
            async with gate:
                values[index] = await self.of(store, rollouts[index])

        await asyncio.gather(*(one(i) for i in missing))
        return values

    def _remember(self, rollout_id: str, fingerprint: _Fingerprint, reward: Optional[float]) -> None:
        self._cache[rollout_id] = (fingerprint, reward)
        self._cache.move_to_end(rollout_id)
        while len(self._cache) > self.max_entries:
            forgotten, _ = self._cache.popitem(last=False)
            self._failures.pop(forgotten, None)
