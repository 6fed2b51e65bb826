"""Token accounting that closes: every token a run's rollouts generated is trained on, discarded for a
named reason, or still in flight, and each step's metrics say how many went where.

Per step (the window between two metrics records):

    generated == trained + sum(discarded[reason]) + (in_flight_end - in_flight_start)

`generated` counts the response tokens (with token ids) that the run's rollouts recorded in the store
since the previous record, every attempt of a rollout included; `in_flight` the tokens of rollouts the
algorithm enqueued and has not settled yet (still running, or finished and waiting for a later step).
A rollout is settled once: its tokens leave the flight and must each land in `trained` or a discard
reason. The algorithm checks the identity every step (`TokenLedger.close`); a gap is logged as an
error, or raised as `TokenAccountingError` with `GRPOConfig.strict_token_accounting`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional

from ...adapter.trajectory import triplet_tokens
from ...types.core import Triplet

__all__ = [
    "DISCARD_REASONS",
    "StepTokens",
    "TokenAccountingError",
    "TokenLedger",
    "response_tokens",
    "token_metric_keys",
]

logger = logging.getLogger(__name__)

DISCARD_REASONS = (
    "failed",
    "timeout",
    "stale",
    "tied",
    "no_signal",
    "truncated",
    "prompt_too_long",
    "no_role",
    "update_cap",
    "rejected",
    "eval",
)
"""Why generated tokens were not trained on:

- failed: the attempt failed (an exception, unresponsive) or the rollout was cancelled;
- timeout: the rollout, one of its LLM calls or its reward timed out (`agentlightning.timeout.location`
  on a span, attempt status `timeout`, or not finished within `rollout_timeout_s`);
- stale: async, its group had a sample more than `max_staleness` updates old;
- tied: `drop_tied_groups`, all rewards of its group were equal (zero advantage);
- no_signal: `skip_no_signal_updates` skipped the step's update (no advantage anywhere);
- truncated: past `max_response_length`; prompt_too_long: its row's prompt exceeded `max_prompt_length`;
- no_role: with `roles`, a call of no role; update_cap: rows `max_updates_per_batch` left out;
- rejected: RFT, a rollout not selected; eval: validation rollouts (never trained on).
"""


class TokenAccountingError(RuntimeError):
    """A step's token counts do not close (raised with `strict_token_accounting`)."""


def response_tokens(triplets: Iterable[Triplet]) -> int:
    """Generated tokens of a rollout: the response token ids of its calls that recorded them."""
    total = 0
    for triplet in triplets:
        tokens = triplet_tokens(triplet)
        if tokens is not None:
            total += len(tokens[1])
    return total


def token_metric_keys() -> List[str]:
    """Every metric name a step's token accounting writes."""
    keys = ["tokens/generated", "tokens/trained", "tokens/discarded", "tokens/in_flight", "tokens/in_flight_start"]
    return [*keys, *(f"tokens/discarded/{reason}" for reason in DISCARD_REASONS), "tokens/unaccounted"]


@dataclass
class StepTokens:
    """One step's token counts."""

    generated: int
    trained: int
    discarded: Dict[str, int]
    in_flight_start: int
    in_flight_end: int

    @property
    def unaccounted(self) -> int:
        """0 when the identity holds; otherwise generated tokens that went nowhere (negative: counted twice)."""
        settled = self.trained + sum(self.discarded.values())
        return self.generated - settled - (self.in_flight_end - self.in_flight_start)

    @property
    def closes(self) -> bool:
        return self.unaccounted == 0

    def as_metrics(self) -> Dict[str, float]:
        metrics = {
            "tokens/generated": float(self.generated),
            "tokens/trained": float(self.trained),
            "tokens/discarded": float(sum(self.discarded.values())),
            "tokens/in_flight": float(self.in_flight_end),
            "tokens/in_flight_start": float(self.in_flight_start),
        }
        for reason in DISCARD_REASONS:
            metrics[f"tokens/discarded/{reason}"] = float(self.discarded.get(reason, 0))
        metrics["tokens/unaccounted"] = float(self.unaccounted)
        return metrics


@dataclass
class TokenLedger:
    """Where the tokens of a run's rollouts are: in flight, trained on or discarded (see the module docstring).

    The algorithm `track`s each rollout it enqueues, `observe`s the tokens of running ones, `settle`s a
    rollout when it takes it (training rows or a discard), and `abandon`s one it stops waiting for (tokens
    it records later are discarded for the same reason). `close` ends the step and checks the identity.
    """

    strict: bool = False
    in_flight: Dict[str, int] = field(default_factory=lambda: {})
    """Tokens seen so far of each tracked, unsettled rollout."""
    abandoned: Dict[str, str] = field(default_factory=lambda: {})
    """Rollouts given up on while maybe still running, and the reason their later tokens are discarded."""
    _abandoned_seen: Dict[str, int] = field(default_factory=lambda: {})
    _settled_seen: Dict[str, int] = field(default_factory=lambda: {})
    _generated: int = 0
    _trained: int = 0
    _discarded: Dict[str, int] = field(default_factory=lambda: {})
    _in_flight_start: int = 0

    def track(self, rollout_id: str) -> None:
        """A rollout was enqueued (or found in the store on resume): its tokens are in flight from now on."""
        if rollout_id not in self.in_flight and rollout_id not in self._settled_seen:
            self.in_flight[rollout_id] = 0

    def observe(self, rollout_id: str, tokens: int) -> None:
        """A tracked rollout has recorded `tokens` so far (all attempts); the new ones count as generated."""
        if rollout_id in self.abandoned:
            self._observe_abandoned(rollout_id, tokens)
            return
        if rollout_id not in self.in_flight:
            return  # settled already, or not ours
        # Usually grows; a count that shrinks (an adapter reading more spans differently) is corrected too.
        self._generated += tokens - self.in_flight[rollout_id]
        self.in_flight[rollout_id] = tokens

    def settle(self, rollout_id: str, tokens: int) -> int:
        """Take a rollout out of the flight with its final `tokens`; the caller assigns each one (`train`,
        `discard`). Returns `tokens`."""
        self.track(rollout_id)
        self.observe(rollout_id, tokens)
        seen = self.in_flight.pop(rollout_id, tokens)
        self._settled_seen[rollout_id] = seen
        return seen

    def abandon(self, rollout_id: str, tokens: int, reason: str) -> None:
        """Settle a rollout the step stops waiting for, discarding its tokens now and any it records later."""
        self.discard(reason, self.settle(rollout_id, tokens))
        self.watch(rollout_id, tokens, reason)

    def watch(self, rollout_id: str, tokens: int, reason: str) -> None:
        """A settled rollout may still record tokens (its runner was given up on, not stopped): those it
        records beyond `tokens` count as generated and discarded for `reason`."""
        self.abandoned[rollout_id] = reason
        self._abandoned_seen[rollout_id] = tokens

    def forget(self, rollout_id: str) -> None:
        """Stop watching an abandoned rollout (it is terminal: it records no more tokens)."""
        self.abandoned.pop(rollout_id, None)
        self._abandoned_seen.pop(rollout_id, None)

    def _observe_abandoned(self, rollout_id: str, tokens: int) -> None:
        seen = self._abandoned_seen.get(rollout_id, 0)
        if tokens > seen:
            self._generated += tokens - seen
            self.discard(self.abandoned[rollout_id], tokens - seen)
            self._abandoned_seen[rollout_id] = tokens

    def train(self, tokens: int) -> None:
        self._trained += tokens

    def discard(self, reason: str, tokens: int) -> None:
        if reason not in DISCARD_REASONS:
            raise ValueError(f"unknown discard reason {reason!r}; use one of {list(DISCARD_REASONS)}")
        if tokens:
            self._discarded[reason] = self._discarded.get(reason, 0) + tokens

    def discard_counts(self, counts: Mapping[str, int]) -> None:
        for reason, tokens in counts.items():
            self.discard(reason, tokens)

    def close(self, step: int, where: Optional[str] = None) -> StepTokens:
        """End the step: its counts (then reset); a gap in the identity is logged as an error, or raised
        (`strict`)."""
        result = StepTokens(
            generated=self._generated,
            trained=self._trained,
            discarded=dict(self._discarded),
            in_flight_start=self._in_flight_start,
            in_flight_end=sum(self.in_flight.values()),
        )
        self._generated, self._trained, self._discarded = 0, 0, {}
        self._in_flight_start = result.in_flight_end
        if not result.closes:
            message = (
                f"{where or 'GRPO'} step {step}: token accounting does not close: generated={result.generated}, "
                f"trained={result.trained}, discarded={result.discarded}, in flight {result.in_flight_start} -> "
                f"{result.in_flight_end}; {result.unaccounted} tokens unaccounted for"
            )
            if self.strict:
                raise TokenAccountingError(message)
            logger.error(message)
        return result
