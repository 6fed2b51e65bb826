"""What an adapter did with a rollout's spans: kept calls, dropped calls and why, unmatched rewards, token drift.

Adapters never drop an LLM call silently: every LLM-looking span that does not become a triplet of its own
is listed here with a reason, so algorithms can log it, put counters in rollout metadata and show it in
the dashboard.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any, Callable, Literal, Optional

from pydantic import BaseModel, Field, computed_field

from agentlightning.types import Triplet

from .trajectory import BREAK_CAUSES, BreakCause, classify_break

__all__ = [
    "DropReason",
    "DroppedLlmCall",
    "UnmatchedReward",
    "TokenDrift",
    "AdaptationReport",
    "check_token_drift",
    "NO_LLM_SPANS",
]

DropReason = Literal[
    "no_token_ids",
    "inside_reward_span",
    "agent_filtered",
    "duplicate",
    "nested_llm_call",
    "name_not_matched",
]
"""Why an LLM-looking span did not become a triplet of its own.

- `no_token_ids`: skipped because it carried no token ids and `_skip_empty_token_spans` is on.
- `inside_reward_span`: made while computing a reward (e.g. an LLM judge) and `exclude_llm_call_in_reward` is on.
- `agent_filtered`: not inside an agent whose name matches `agent_match`.
- `duplicate`: another span already reported the same response id (its data was merged into that triplet).
- `nested_llm_call`: the same call seen by an outer instrumentation layer (merged into the outer triplet).
- `name_not_matched`: carries LLM request/response attributes but its name does not match a custom `llm_call_match`.
"""

NO_LLM_SPANS = "no_llm_spans"
"""Key counted in `drop_counts` when a rollout has spans but none of them is an LLM call: its calls, if it made
any, were not captured (an uninstrumented client, a subprocess, a model URL that bypasses the proxy)."""

# Reasons that mean "this call is represented by another triplet" rather than "this call is lost".
MERGE_REASONS: frozenset[str] = frozenset({"duplicate", "nested_llm_call"})


class DroppedLlmCall(BaseModel):
    """One LLM-looking span that did not become a triplet of its own."""

    span_id: str
    name: str
    sequence_id: int
    reason: DropReason
    detail: str = ""
    merged_into: Optional[str] = None
    """Span id of the triplet's anchor span that absorbed this span's data (merge reasons only)."""


class UnmatchedReward(BaseModel):
    """A reward span that could not be attached to any triplet."""

    span_id: str
    sequence_id: int
    value: float
    detail: str


class TokenDrift(BaseModel):
    """A turn whose prompt token ids do not extend the previous turn's prompt + response token ids."""

    turn: int
    """Index of the triplet (in adapter output order) whose prompt diverges."""
    previous_turn: int
    mismatch_index: int
    """First token position where the prompt differs from the previous turn's prompt + response."""
    expected_prefix_length: int
    prompt_length: int
    span_id: Optional[str] = None
    cause: BreakCause = "other"
    """Why the ids diverge: `chat_template`, `retokenization` or `other` (see `adapter.trajectory`).
    Trajectory aggregation starts a new training row at every such turn."""


_COUNTERS = (
    "n_spans", "n_llm_spans", "n_triplets", "n_triplets_without_token_ids", "n_triplets_retokenized", "n_reward_spans",
)  # fmt: skip
"""The counters of `AdaptationReport.to_metadata`, in order."""


class AdaptationReport(BaseModel):
    """Structured account of one adapter run over one rollout's spans."""

    adapter: str
    n_spans: int = 0
    n_llm_spans: int = 0
    """Spans recognised as LLM calls (by name or by their request/response attributes)."""
    n_triplets: int = 0
    n_triplets_without_token_ids: int = 0
    n_triplets_retokenized: int = 0
    """Triplets whose token ids were rebuilt from their messages with the policy tokenizer (`retokenize.py`)."""
    n_reward_spans: int = 0
    dropped: list[DroppedLlmCall] = Field(default_factory=list)
    unmatched_rewards: list[UnmatchedReward] = Field(default_factory=list)
    token_drift: list[TokenDrift] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    @property
    def no_llm_spans(self) -> bool:
        """Spans were recorded but not a single LLM call among them (never a silent zero)."""
        return self.n_spans > 0 and self.n_llm_spans == 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def drop_counts(self) -> dict[str, int]:
        """Number of dropped/merged spans per reason, plus `no_llm_spans: 1` for a rollout without LLM spans."""
        counts = dict(Counter(entry.reason for entry in self.dropped))
        if self.no_llm_spans:
            counts[NO_LLM_SPANS] = 1
        return counts

    @computed_field  # type: ignore[prop-decorator]
    @property
    def break_counts(self) -> dict[str, int]:
        """Continuity breaks (turns that cannot join the previous turn's training row) per cause."""
        counts = Counter(drift.cause for drift in self.token_drift)
        return {cause: counts.get(cause, 0) for cause in BREAK_CAUSES}

    @property
    def lost_llm_calls(self) -> list[DroppedLlmCall]:
        """Dropped spans whose call is not represented by any triplet (merges excluded)."""
        return [entry for entry in self.dropped if entry.reason not in MERGE_REASONS]

    def to_metadata(self) -> dict[str, Any]:
        """Compact counters suitable for rollout metadata or metrics."""
        return {
            **{name: getattr(self, name) for name in _COUNTERS},
            "n_unmatched_rewards": len(self.unmatched_rewards),
            "n_token_drift_turns": len(self.token_drift),
            "break_counts": self.break_counts,
            "drop_counts": self.drop_counts,
        }

    def summary(self) -> str:
        """One human-readable line."""
        parts = [f"{self.n_triplets} triplet(s) from {self.n_llm_spans} LLM span(s) in {self.n_spans} span(s)"]
        if self.no_llm_spans:
            parts.append("no LLM call was captured (is the agent's LLM client instrumented or behind the proxy?)")
        if self.dropped:
            counts = ", ".join(f"{reason}={count}" for reason, count in sorted(self.drop_counts.items()))
            parts.append(f"not kept as triplets: {counts}")
        if self.n_triplets_without_token_ids:
            parts.append(f"{self.n_triplets_without_token_ids} triplet(s) without token ids")
        if self.n_triplets_retokenized:
            parts.append(f"{self.n_triplets_retokenized} triplet(s) retokenized with the policy tokenizer")
        if self.unmatched_rewards:
            parts.append(f"{len(self.unmatched_rewards)} unmatched reward(s)")
        if self.token_drift:
            causes = ", ".join(f"{cause}={count}" for cause, count in self.break_counts.items() if count)
            parts.append(f"token drift at turn(s) {[drift.turn for drift in self.token_drift]} ({causes})")
        return "; ".join(parts)

    def log(self, logger: logging.Logger, *, context: str = "") -> None:
        """Log the report: a warning when LLM calls produced no triplet or calls were lost, else debug/info."""
        prefix = f"[{context}] " if context else ""
        if self.n_llm_spans > 0 and self.n_triplets == 0:
            reasons = "; ".join(
                f"span {entry.span_id} ({entry.name}): {entry.reason}{' - ' + entry.detail if entry.detail else ''}"
                for entry in self.dropped
            )
            message = f"{prefix}{self.adapter}: {self.n_llm_spans} LLM span(s) but zero triplets. Reasons: {reasons or 'none'}"
            if message not in self.warnings:
                self.warnings.append(message)
            logger.warning(message)
            return
        for warning in self.warnings:
            logger.warning("%s%s", prefix, warning)
        if (
            self.lost_llm_calls
            or self.unmatched_rewards
            or self.token_drift
            or self.no_llm_spans
            or self.n_triplets_retokenized
        ):
            logger.info("%s%s: %s", prefix, self.adapter, self.summary())
        else:
            logger.debug("%s%s: %s", prefix, self.adapter, self.summary())


def _token_ids(side: Any) -> Optional[list[int]]:
    if isinstance(side, dict):
        ids = side.get("token_ids")  # type: ignore[union-attr]
        if isinstance(ids, list) and ids:
            return ids  # type: ignore[return-value]
    return None


def check_token_drift(
    triplets: Sequence[Triplet], decode: Optional[Callable[[list[int]], str]] = None
) -> list[TokenDrift]:
    """Turns of a multi-turn rollout whose prompt ids do not extend the previous turn's prompt + response ids.

    Trajectory-level training concatenates turns and relies on each prompt re-tokenising the history exactly;
    a chat template that re-renders earlier turns differently breaks that silently. Turns without token ids
    are skipped (the next turn is compared with the last turn that had them). `decode` (a tokenizer's
    decode) lets the cause tell re-rendered text from re-tokenized text; see `classify_break`.
    """
    drifts: list[TokenDrift] = []
    previous: Optional[tuple[int, list[int], int]] = None
    for index, triplet in enumerate(triplets):
        prompt_ids = _token_ids(triplet.prompt)
        response_ids = _token_ids(triplet.response) or []
        if prompt_ids is None:
            continue
        if previous is not None:
            previous_index, expected, previous_prompt_length = previous
            mismatch = _first_mismatch(expected, prompt_ids)
            if mismatch is not None:
                cause = classify_break(
                    expected[:previous_prompt_length], expected[previous_prompt_length:], prompt_ids, mismatch, decode
                )
                drifts.append(
                    TokenDrift(
                        turn=index,
                        previous_turn=previous_index,
                        mismatch_index=mismatch,
                        expected_prefix_length=len(expected),
                        prompt_length=len(prompt_ids),
                        span_id=triplet.metadata.get("span_id"),
                        cause=cause,
                    )
                )
        previous = (index, prompt_ids + response_ids, len(prompt_ids))
    return drifts


def _first_mismatch(expected_prefix: list[int], prompt: list[int]) -> Optional[int]:
    for position, token in enumerate(expected_prefix):
        if position >= len(prompt) or prompt[position] != token:
            return position
    return None
