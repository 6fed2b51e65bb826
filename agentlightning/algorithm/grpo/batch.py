"""From triplets to token-level training batches.

Every LLM call of a rollout (a triplet with prompt and response token ids) becomes one `Sample` that
carries its turn's advantage. A batch concatenates prompt and response ids, right-pads them, and marks
the response tokens in `response_mask`: the loss only ever sees response tokens.

Alignment: position t of `input_ids` holds token x_t; `old_logprobs[:, t]` is log pi_old(x_t | x_<t),
the value the policy server reported when it sampled x_t, and 0 outside the response.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Dict, Hashable, List, Optional, Sequence, Tuple

from ...types.core import Triplet
from .advantages import group_advantages, turn_returns

if TYPE_CHECKING:
    import torch

__all__ = [
    "Sample",
    "RolloutTriplets",
    "TokenBatch",
    "triplet_tokens",
    "samples_from_rollouts",
    "truncate_sample",
    "collate",
]

logger = logging.getLogger(__name__)


@dataclass
class Sample:
    """One LLM call to train on."""

    prompt_ids: List[int]
    response_ids: List[int]
    advantage: float
    old_logprobs: Optional[List[float]] = None
    """Logprobs of the response tokens at sampling time; None: the learner recomputes them."""
    ref_logprobs: Optional[List[float]] = None
    """Filled in by the learner when a KL penalty is used."""
    reward: float = 0.0
    """The turn return G_t (for logging)."""
    rollout_id: str = ""
    group_id: Hashable = ""


@dataclass
class RolloutTriplets:
    """The triplets of one finished rollout and the group (task) it belongs to."""

    rollout_id: str
    group_id: Hashable
    triplets: List[Triplet]
    final_reward: Optional[float] = None
    """Overrides the last triplet's reward when given (e.g. `find_final_reward` of the spans)."""


def _logprob_values(raw: Any) -> Optional[List[float]]:
    """Accepts a list of floats, OpenAI `logprobs` / `logprobs.content` entries, or their JSON text."""
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return None
    if isinstance(raw, dict):
        raw = raw.get("content")  # type: ignore[reportUnknownMemberType]
    if not isinstance(raw, list):
        return None
    values: List[float] = []
    for entry in raw:  # type: ignore[reportUnknownVariableType]
        value = entry.get("logprob") if isinstance(entry, dict) else entry  # type: ignore[reportUnknownMemberType]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        values.append(float(value))
    return values


def _token_ids(part: Any) -> Optional[List[int]]:
    ids = part.get("token_ids") if isinstance(part, dict) else None  # type: ignore[reportUnknownMemberType]
    if isinstance(ids, str):
        try:
            ids = json.loads(ids)
        except json.JSONDecodeError:
            return None
    if not isinstance(ids, (list, tuple)) or not all(isinstance(i, int) for i in ids):  # type: ignore[reportUnknownVariableType]
        return None
    return [int(i) for i in ids]  # type: ignore[reportUnknownVariableType]


def triplet_tokens(triplet: Triplet) -> Optional[Tuple[List[int], List[int], Optional[List[float]]]]:
    """`(prompt_ids, response_ids, response_logprobs)` of a triplet, or None when it lacks token ids."""
    prompt_ids, response_ids = _token_ids(triplet.prompt), _token_ids(triplet.response)
    if not prompt_ids or not response_ids:
        return None
    raw = triplet.response.get("logprobs") if isinstance(triplet.response, dict) else None  # type: ignore[reportUnknownMemberType]
    logprobs = _logprob_values(raw)
    if logprobs is not None and len(logprobs) != len(response_ids):
        logger.warning(
            "Triplet has %d logprobs for %d response tokens; they will be recomputed", len(logprobs), len(response_ids)
        )
        logprobs = None
    return prompt_ids, response_ids, logprobs


def samples_from_rollouts(
    rollouts: Sequence[RolloutTriplets],
    *,
    turn_discount: float = 1.0,
    scale_advantages: bool = True,
    reward_fill_value: float = 0.0,
    eps: float = 1e-6,
    stats: Optional[Dict[str, int]] = None,
) -> List[Sample]:
    """Samples with group-normalised advantages; triplets without token ids are skipped and counted.

    `stats` (if given) receives `triplets`, `skipped_triplets` (no token ids) and `rollouts_without_samples`.
    """
    counters = stats if stats is not None else {}
    for key in ("triplets", "skipped_triplets", "rollouts_without_samples"):
        counters.setdefault(key, 0)
    all_returns: List[List[float]] = []
    for rollout in rollouts:
        rewards = [t.reward for t in rollout.triplets]
        if rollout.final_reward is not None and rewards:
            rewards[-1] = rollout.final_reward
        elif rollout.final_reward is not None:
            rewards = [rollout.final_reward]
        all_returns.append(turn_returns(rewards, turn_discount, reward_fill_value))
    advantages = group_advantages(all_returns, [r.group_id for r in rollouts], scale=scale_advantages, eps=eps)
    samples: List[Sample] = []
    for rollout, returns, rollout_advantages in zip(rollouts, all_returns, advantages, strict=False):
        produced = 0
        for triplet, turn_return, advantage in zip(rollout.triplets, returns, rollout_advantages, strict=False):
            counters["triplets"] += 1
            tokens = triplet_tokens(triplet)
            if tokens is None:
                counters["skipped_triplets"] += 1
                continue
            prompt_ids, response_ids, logprobs = tokens
            samples.append(
                Sample(
                    prompt_ids=prompt_ids,
                    response_ids=response_ids,
                    advantage=advantage,
                    old_logprobs=logprobs,
                    reward=turn_return,
                    rollout_id=rollout.rollout_id,
                    group_id=rollout.group_id,
                )
            )
            produced += 1
        if produced == 0:
            counters["rollouts_without_samples"] += 1
    if counters["skipped_triplets"]:
        logger.warning(
            "Skipped %d of %d triplets without prompt/response token ids; is the policy server returning "
            "token ids and the tracer recording them?",
            counters["skipped_triplets"],
            counters["triplets"],
        )
    return samples


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
    prompt_lengths: List[int] = field(default_factory=lambda: [])
    response_lengths: List[int] = field(default_factory=lambda: [])

    def to(self, device: torch.device) -> TokenBatch:
        tensors = {
            name: getattr(self, name).to(device)
            for name in ("input_ids", "attention_mask", "response_mask", "old_logprobs", "ref_logprobs", "advantages")
        }
        return replace(self, **tensors)

    def response_values(self, per_token: torch.Tensor) -> List[List[float]]:
        """Cut a `[B, L]` per-token tensor back into each sample's response values."""
        rows = per_token.detach().cpu().tolist()
        return [
            row[start : start + length]
            for row, start, length in zip(rows, self.prompt_lengths, self.response_lengths, strict=False)
        ]


def collate(samples: Sequence[Sample], pad_token_id: int) -> TokenBatch:
    """Build a `TokenBatch`; missing old/ref logprobs become zeros (fill them before computing the loss)."""
    import torch

    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    size = (len(samples), width)
    input_ids = torch.full(size, pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros(size, dtype=torch.long)
    response_mask = torch.zeros(size, dtype=torch.float32)
    old_logprobs = torch.zeros(size, dtype=torch.float32)
    ref_logprobs = torch.zeros(size, dtype=torch.float32)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, : p + r] = torch.tensor(s.prompt_ids + s.response_ids, dtype=torch.long)
        attention_mask[i, : p + r] = 1
        response_mask[i, p : p + r] = 1.0
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
        prompt_lengths=[len(s.prompt_ids) for s in samples],
        response_lengths=[len(s.response_ids) for s in samples],
    )
