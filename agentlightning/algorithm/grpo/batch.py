"""From triplets to token-level training batches.

A rollout's LLM calls become training rows in one of two ways (`aggregation`):

- "trajectory" (default): consecutive calls merge into one row while each prompt extends the previous
  prompt + response exactly (`adapter.trajectory.merge_turns`); the tokens between responses (tool
  results, user turns) are context with loss mask 0. A continuity break starts a new row.
- "transition": every call is its own row (each one recomputes the shared prefix).

Every row of a rollout carries the rollout's advantage (`advantage_level="rollout"`, computed once from
its total return), or with `advantage_level="turn"` the advantage of its first call's discounted return.
A batch concatenates prompt and response ids, right-pads them, and marks the trained tokens in
`response_mask`: the loss only ever sees tokens the model generated.

Alignment: position t of `input_ids` holds token x_t; `old_logprobs[:, t]` is log pi_old(x_t | x_<t),
the value the policy server reported when it sampled x_t, and 0 outside the trained tokens.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Dict, Hashable, List, Literal, Optional, Sequence

from ...adapter.retokenize import RETOKENIZED, TOKEN_IDS_SOURCE
from ...adapter.trajectory import (
    BREAK_CAUSES,
    TrajectoryRow,
    TurnTokens,
    merge_turns,
    observation_keys,
    triplet_tokens,
)
from ...types.core import Triplet
from .advantages import group_advantages, step_advantages, turn_returns

if TYPE_CHECKING:
    import torch

__all__ = [
    "Sample",
    "RolloutTriplets",
    "TokenBatch",
    "triplet_tokens",
    "samples_from_rollouts",
    "truncate_sample",
    "rollout_row_weights",
    "policy_version_of",
    "collate",
    "micro_batches",
]

logger = logging.getLogger(__name__)

Aggregation = Literal["trajectory", "transition"]
AdvantageLevel = Literal["rollout", "turn"]


@dataclass
class Sample:
    """One training row: a prompt and the tokens after it (one LLM call, or several merged calls)."""

    prompt_ids: List[int]
    response_ids: List[int]
    advantage: float
    old_logprobs: Optional[List[float]] = None
    """Logprobs of the response tokens at sampling time; None: the learner recomputes them."""
    ref_logprobs: Optional[List[float]] = None
    """Filled in by the learner when a KL penalty is used."""
    reward: float = 0.0
    """The return of the row's first call (for logging)."""
    rollout_id: str = ""
    group_id: Hashable = ""
    loss_mask: Optional[List[int]] = None
    """1 for tokens of `response_ids` the model generated, 0 for context between merged calls; None: all 1."""
    turns: int = 1
    """LLM calls merged into this row."""
    token_advantages: Optional[List[float]] = None
    """Per-token advantages over `response_ids` (step-level credit); None: `advantage` on every token."""
    policy_version: Optional[int] = None
    """Weights version of the policy that sampled the row (the oldest of its calls), when recorded."""
    is_weights: Optional[List[float]] = None
    """Per-token truncated importance weights over `response_ids` (async training); None: all 1."""
    role: Optional[str] = None
    """The agent role (LoRA adapter) this row trains, with `GRPOConfig.roles`; None: the one policy."""

    @property
    def trained_tokens(self) -> int:
        return len(self.response_ids) if self.loss_mask is None else sum(self.loss_mask)


@dataclass
class RolloutTriplets:
    """The triplets of one finished rollout and the group (task) it belongs to."""

    rollout_id: str
    group_id: Hashable
    triplets: List[Triplet]
    final_reward: Optional[float] = None
    """Overrides the last triplet's reward when given (e.g. `find_final_reward` of the spans)."""


_COUNTERS = (
    "triplets",
    "skipped_triplets",
    "rollouts_without_samples",
    "rows",
    "rows_dropped_prompt_too_long",
    "rows_truncated",
    "triplets_without_role",
    "triplets_retokenized",
    "tokens_truncated",
    "tokens_prompt_too_long",
    "tokens_without_role",
    *(f"breaks_{cause}" for cause in BREAK_CAUSES),
)


def samples_from_rollouts(
    rollouts: Sequence[RolloutTriplets],
    *,
    aggregation: Aggregation = "trajectory",
    advantage_level: AdvantageLevel = "rollout",
    turn_discount: float = 1.0,
    scale_advantages: bool = True,
    reward_fill_value: float = 0.0,
    eps: float = 1e-6,
    step_advantage_weight: float = 0.0,
    max_prompt_length: Optional[int] = None,
    max_response_length: Optional[int] = None,
    decode: Optional[Callable[[List[int]], str]] = None,
    stats: Optional[Dict[str, int]] = None,
    role_of: Optional[Callable[[Triplet], Optional[str]]] = None,
) -> List[Sample]:
    """Training rows with group-normalised advantages (see the module docstring).

    `step_advantage_weight` w > 0 adds w x the GiGPO-style step advantage (`advantages.step_advantages`,
    anchors: identical observations, see `adapter.trajectory.observation_keys`) to each call's advantage;
    a merged row then carries per-token advantages.

    Limits: a row whose (first) prompt is longer than `max_prompt_length` is dropped; a row's tokens past
    `max_response_length` are cut. `decode` (the tokenizer's) sharpens the cause of continuity breaks.

    `role_of` (one LoRA per agent role, see `roles.py`) tags each call with its role: only calls of the
    same role merge into a row, rows carry `Sample.role`, and calls without a role are left out (their
    rewards still count in the rollout's return, so advantages stay per rollout group).

    `stats` (if given) receives the counts: `triplets`, `skipped_triplets` (no token ids),
    `rollouts_without_samples`, `rows`, `rows_dropped_prompt_too_long`, `rows_truncated` and
    `breaks_<cause>` for each continuity break cause (trajectory aggregation only), and
    `triplets_without_role` (with `role_of`), and `triplets_retokenized` (ids rebuilt from text, see
    `adapter.retokenize`); and the generated tokens no row trains: `tokens_truncated`, `tokens_prompt_too_long`
    and `tokens_without_role` (the rows' `trained_tokens` plus these are the rollouts' response tokens).
    """
    if aggregation not in ("trajectory", "transition"):
        raise ValueError(f"aggregation must be 'trajectory' or 'transition', got {aggregation!r}")
    if advantage_level not in ("rollout", "turn"):
        raise ValueError(f"advantage_level must be 'rollout' or 'turn', got {advantage_level!r}")
    counters = stats if stats is not None else {}
    for key in _COUNTERS:
        counters.setdefault(key, 0)
    # Per rollout: the return of each call, then advantages relative to the rollout's group.
    returns = [_call_returns(rollout, turn_discount, reward_fill_value) for rollout in rollouts]
    groups = [r.group_id for r in rollouts]
    advantages = group_advantages(returns, groups, scale=scale_advantages, eps=eps)
    calls = [_calls_of(rollout, counters, role_of) for rollout in rollouts]
    call_advantages: List[List[float]] = [
        [values[0]] * len(values) if advantage_level == "rollout" and values else list(values) for values in advantages
    ]
    if step_advantage_weight:
        call_advantages = _with_step_advantages(
            call_advantages, rollouts, calls, returns, step_advantage_weight, scale=scale_advantages, eps=eps
        )
    # Per rollout again: its calls become rows, each row a sample carrying its first call's advantage.
    limits = (max_prompt_length, max_response_length)
    samples: List[Sample] = []
    for rollout, rollout_returns, rollout_advantages, rollout_calls in zip(
        rollouts, returns, call_advantages, calls, strict=True
    ):
        produced: List[Sample] = []
        for row in _rows_of(rollout_calls, aggregation, decode, counters):
            sample = _sample_of(
                row,
                rollout,
                rollout_calls,
                rollout_returns,
                rollout_advantages,
                step_advantage_weight,
                limits,
                counters,
            )
            if sample is not None:
                produced.append(sample)
        samples.extend(produced)
        counters["rows"] += len(produced)
        if not produced:
            counters["rollouts_without_samples"] += 1
    if counters["skipped_triplets"]:
        logger.warning(
            "Skipped %d of %d triplets without prompt/response token ids; is the policy server returning "
            "token ids and the tracer recording them?",
            counters["skipped_triplets"],
            counters["triplets"],
        )
    return samples


@dataclass
class _RolloutCalls:
    """The calls of one rollout that carry token ids: their tokens, role and the policy version of each call."""

    turns: List[TurnTokens]
    roles: Dict[int, Optional[str]]
    versions: List[Optional[int]]


def _call_returns(rollout: RolloutTriplets, discount: float, fill_value: float) -> List[float]:
    """The (discounted) return of each call of a rollout, its final reward replacing the last call's."""
    rewards = [t.reward for t in rollout.triplets]
    if rollout.final_reward is not None and rewards:
        rewards[-1] = rollout.final_reward
    elif rollout.final_reward is not None:
        rewards = [rollout.final_reward]
    return turn_returns(rewards, discount, fill_value)


def _calls_of(
    rollout: RolloutTriplets, counters: Dict[str, int], role_of: Optional[Callable[[Triplet], Optional[str]]]
) -> _RolloutCalls:
    """The rollout's calls with token ids (counting those without, retokenized ones and those of no role)."""
    turns: List[TurnTokens] = []
    roles: Dict[int, Optional[str]] = {}
    for index, triplet in enumerate(rollout.triplets):
        counters["triplets"] += 1
        tokens = triplet_tokens(triplet)
        if tokens is None:
            counters["skipped_triplets"] += 1
            continue
        if triplet.metadata.get(TOKEN_IDS_SOURCE) == RETOKENIZED:
            counters["triplets_retokenized"] += 1
        role = role_of(triplet) if role_of is not None else None
        if role_of is not None and role is None:
            counters["triplets_without_role"] += 1
            counters["tokens_without_role"] += len(tokens[1])
            continue
        roles[index] = role
        turns.append(TurnTokens(*tokens, index=index))
    return _RolloutCalls(turns, roles, [policy_version_of(t) for t in rollout.triplets])


def _with_step_advantages(
    call_advantages: List[List[float]],
    rollouts: Sequence[RolloutTriplets],
    calls: Sequence[_RolloutCalls],
    returns: List[List[float]],
    weight: float,
    *,
    scale: bool,
    eps: float,
) -> List[List[float]]:
    """Each call's advantage plus `weight` x its GiGPO-style step advantage (anchors: identical observations)."""
    observations: List[List[object]] = []
    for rollout, rollout_calls, rollout_returns in zip(rollouts, calls, returns, strict=True):
        keys: List[object] = [("no-token-ids", rollout.rollout_id, i) for i in range(len(rollout_returns))]
        for turn, key in zip(rollout_calls.turns, observation_keys(rollout_calls.turns), strict=True):
            keys[turn.index] = key
        observations.append(keys)
    steps = step_advantages(returns, observations, [r.group_id for r in rollouts], scale=scale, eps=eps)
    return [
        [a + weight * s for a, s in zip(row, step_row, strict=True)]
        for row, step_row in zip(call_advantages, steps, strict=True)
    ]


def _rows_of(
    calls: _RolloutCalls,
    aggregation: Aggregation,
    decode: Optional[Callable[[List[int]], str]],
    counters: Dict[str, int],
) -> List[TrajectoryRow]:
    """A rollout's rows: merged calls (one role's never with another's), or one row per call."""
    if aggregation == "transition":
        return [row for turn in calls.turns for row in merge_turns([turn])[0]]
    rows: List[TrajectoryRow] = []
    for role_turns in _split_by_role(calls.turns, calls.roles):
        role_rows, breaks = merge_turns(role_turns, decode=decode)
        rows.extend(role_rows)
        for item in breaks:
            counters[f"breaks_{item.cause}"] += 1
    return rows


def _sample_of(
    row: TrajectoryRow,
    rollout: RolloutTriplets,
    calls: _RolloutCalls,
    returns: List[float],
    advantages: List[float],
    step_advantage_weight: float,
    limits: tuple[Optional[int], Optional[int]],
    counters: Dict[str, int],
) -> Optional[Sample]:
    """One row as a training sample (None: its prompt is over the limit), cut to the response limit."""
    max_prompt_length, max_response_length = limits
    first = row.turns[0]
    if max_prompt_length is not None and len(row.prompt_ids) > max_prompt_length:
        counters["rows_dropped_prompt_too_long"] += 1
        counters["tokens_prompt_too_long"] += sum(row.loss_mask)
        return None
    token_advantages: Optional[List[float]] = None
    if step_advantage_weight and len(row.turns) > 1:
        token_advantages = [0.0] * len(row.response_ids)
        bounds = [*row.response_starts[1:], len(row.response_ids)]
        start = 0
        for turn_index, end in zip(row.turns, bounds, strict=True):
            token_advantages[start:end] = [advantages[turn_index]] * (end - start)
            start = end
    versions = (calls.versions[t] for t in row.turns)
    sample = Sample(
        prompt_ids=row.prompt_ids,
        response_ids=row.response_ids,
        advantage=advantages[first],
        token_advantages=token_advantages,
        old_logprobs=row.logprobs,
        reward=returns[first],
        rollout_id=rollout.rollout_id,
        group_id=rollout.group_id,
        loss_mask=row.loss_mask if 0 in row.loss_mask else None,
        turns=len(row.turns),
        role=calls.roles.get(first),
        policy_version=min((v for v in versions if v is not None), default=None),
    )
    if max_response_length is not None and len(sample.response_ids) > max_response_length:
        counters["rows_truncated"] += 1
        kept = truncate_sample(sample, len(sample.prompt_ids), max_response_length)
        counters["tokens_truncated"] += sample.trained_tokens - kept.trained_tokens
        sample = kept
    return sample


def _split_by_role(turns: List[TurnTokens], roles: Dict[int, Optional[str]]) -> List[List[TurnTokens]]:
    """The turns of each role (in order), one list per role; a single list when no role is set."""
    by_role: Dict[Optional[str], List[TurnTokens]] = {}
    for turn in turns:
        by_role.setdefault(roles.get(turn.index), []).append(turn)
    return list(by_role.values()) if by_role else [[]]


_VERSION_RE = re.compile(r"weights-v(\d+)")


def policy_version_of(triplet: Triplet) -> Optional[int]:
    """The weights version that produced a call (the policy server's `system_fingerprint`, "weights-v<N>")."""
    response = triplet.metadata.get("response") if isinstance(triplet.metadata, dict) else None
    fingerprint = response.get("system_fingerprint") if isinstance(response, dict) else None  # type: ignore[reportUnknownMemberType]
    match = _VERSION_RE.fullmatch(fingerprint) if isinstance(fingerprint, str) else None
    return int(match.group(1)) if match else None


def rollout_row_weights(samples: Sequence[Sample]) -> List[float]:
    """1 / (trained tokens of the sample's rollout, all its rows together) per sample: the "rollout-mean"
    weights. Samples without a rollout id count as rollouts of their own."""
    totals: Dict[Hashable, int] = {}
    keys: List[Hashable] = []
    for index, sample in enumerate(samples):
        key: Hashable = sample.rollout_id or ("#row", index)
        keys.append(key)
        totals[key] = totals.get(key, 0) + sample.trained_tokens
    return [1.0 / max(1, totals[key]) for key in keys]


def truncate_sample(sample: Sample, max_prompt_length: int, max_response_length: int) -> Sample:
    """Keep the last `max_prompt_length` prompt tokens and the first `max_response_length` response tokens."""
    if len(sample.prompt_ids) <= max_prompt_length and len(sample.response_ids) <= max_response_length:
        return sample
    cut = slice(0, max_response_length)
    return replace(
        sample,
        prompt_ids=sample.prompt_ids[-max_prompt_length:],
        response_ids=sample.response_ids[cut],
        old_logprobs=None if sample.old_logprobs is None else sample.old_logprobs[cut],
        ref_logprobs=None if sample.ref_logprobs is None else sample.ref_logprobs[cut],
        loss_mask=None if sample.loss_mask is None else sample.loss_mask[cut],
        token_advantages=None if sample.token_advantages is None else sample.token_advantages[cut],
        is_weights=None if sample.is_weights is None else sample.is_weights[cut],
    )


@dataclass
class TokenBatch:
    """Right-padded token tensors of a list of samples (see the module docstring for the alignment)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    old_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor
    advantages: torch.Tensor
    is_weights: torch.Tensor
    """`[B, L]` truncated importance weight of every token (1 unless async training set them)."""
    token_advantages: torch.Tensor
    """`[B, L]` advantage of every token (the row's `advantage`, or its per-token step-level values)."""
    row_weights: torch.Tensor
    """`[B]` weight of each row's token sum under "rollout-mean" (1 / its rollout's trained tokens)."""
    prompt_lengths: List[int] = field(default_factory=lambda: [])
    response_lengths: List[int] = field(default_factory=lambda: [])

    def to(self, device: torch.device) -> TokenBatch:
        tensors = {
            name: getattr(self, name).to(device)
            for name in (
                "input_ids",
                "attention_mask",
                "response_mask",
                "old_logprobs",
                "ref_logprobs",
                "advantages",
                "token_advantages",
                "is_weights",
                "row_weights",
            )
        }
        return replace(self, **tensors)

    def response_values(self, per_token: torch.Tensor) -> List[List[float]]:
        """Cut a `[B, L]` per-token tensor back into each sample's response values."""
        rows = per_token.detach().cpu().tolist()
        return [
            row[start : start + length]
            for row, start, length in zip(rows, self.prompt_lengths, self.response_lengths, strict=False)
        ]


def micro_batches(indices: Sequence[int], samples: Sequence[Sample], size: int) -> List[List[int]]:
    """`indices` of `samples` in micro-batches of `size`, rows with the same prompt together and by length.

    A micro-batch whose rows share their whole prompt encodes it once (`prefix.py`) and pads little; which
    micro-batch a row lands in does not change an optimizer step's gradient (the sum over its rows).
    """
    ordered = sorted(indices, key=lambda i: (samples[i].prompt_ids, len(samples[i].response_ids), i))
    return [ordered[start : start + size] for start in range(0, len(ordered), size)]


def collate(samples: Sequence[Sample], pad_token_id: int, row_weights: Optional[Sequence[float]] = None) -> TokenBatch:
    """Build a `TokenBatch`; missing old/ref logprobs become zeros (fill them before computing the loss).

    `row_weights` default to 1 / each row's trained tokens (every row its own rollout).
    """
    import torch

    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    if row_weights is None:
        row_weights = [1.0 / max(1, s.trained_tokens) for s in samples]
    if len(row_weights) != len(samples):
        raise ValueError(f"got {len(row_weights)} row weights for {len(samples)} samples; give one per sample")
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    size = (len(samples), width)
    input_ids = torch.full(size, pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(size, dtype=torch.long)
    response_mask = torch.zeros(size, dtype=torch.float32)
    old_logprobs = torch.zeros(size, dtype=torch.float32)
    ref_logprobs = torch.zeros(size, dtype=torch.float32)
    token_advantages = torch.zeros(size, dtype=torch.float32)
    is_weights = torch.ones(size, dtype=torch.float32)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        if s.is_weights is not None:
            is_weights[i, p : p + r] = torch.tensor(s.is_weights, dtype=torch.float32)
        if s.token_advantages is None:
            token_advantages[i, p : p + r] = s.advantage
        else:
            token_advantages[i, p : p + r] = torch.tensor(s.token_advantages, dtype=torch.float32)
        input_ids[i, : p + r] = torch.tensor(s.prompt_ids + s.response_ids, dtype=torch.long)
        attention_mask[i, : p + r] = 1
        if s.loss_mask is None:
            response_mask[i, p : p + r] = 1.0
        else:
            response_mask[i, p : p + r] = torch.tensor(s.loss_mask, dtype=torch.float32)
        if s.old_logprobs is not None:
            old_logprobs[i, p : p + r] = torch.tensor(s.old_logprobs, dtype=torch.float32)
        if s.ref_logprobs is not None:
            ref_logprobs[i, p : p + r] = torch.tensor(s.ref_logprobs, dtype=torch.float32)
    return TokenBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        response_mask=response_mask,
        old_logprobs=old_logprobs,
        ref_logprobs=ref_logprobs,
        advantages=torch.tensor([s.advantage for s in samples], dtype=torch.float32),
        token_advantages=token_advantages,
        is_weights=is_weights,
        row_weights=torch.tensor(list(row_weights), dtype=torch.float32),
        prompt_lengths=[len(s.prompt_ids) for s in samples],
        response_lengths=[len(s.response_ids) for s in samples],
    )
