"""From finished rollouts to the token-level batch verl trains on.

A `SampleBuilder` turns one rollout's triplets into `TokenSample`s: `TransitionSampleBuilder` makes one
sample per LLM call; `TrajectorySampleBuilder` merges the calls of a multi-turn rollout whose prompts
extend the previous prompt + response into one sample, masking the tokens the policy did not generate.
Any object with the same `build` method plugs in (`AgentModeDaemon(sample_builder=...)`).
`build_batch` pads the samples into fixed-size tensors (prompts left-padded, responses right-padded),
places each rollout's reward on the last response token and marks over-long prompts for dropping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol

from agentlightning.types import Triplet

from .padding import get_left_padded_ids_and_attention_mask, get_right_padded_ids_and_attention_mask

if TYPE_CHECKING:
    import torch

__all__ = [
    "FinishedRollout",
    "TokenSample",
    "SampleBuilder",
    "TransitionSampleBuilder",
    "TrajectorySampleBuilder",
    "TokenBatch",
    "build_batch",
    "make_sample_builder",
]


@dataclass
class FinishedRollout:
    """A terminal rollout as the daemon sees it: its group (`data_id`), reward and adapted triplets."""

    rollout_id: str
    data_id: str
    status: str
    reward: float
    triplets: list[Triplet] = field(default_factory=list)
    reward_was_missing: bool = False


@dataclass
class TokenSample:
    """One row of the batch. `response_mask` is 1 on tokens the policy generated (those get a loss)."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    reward: float
    data_id: str
    rollout_id: str
    turn_index: int


class SampleBuilder(Protocol):
    """Turns one finished rollout into training samples (the trace aggregation level)."""

    def build(self, rollout: FinishedRollout) -> list[TokenSample]: ...


def _ids(part: Any) -> list[int]:
    if isinstance(part, dict):
        ids = part.get("token_ids")  # type: ignore[reportUnknownMemberType]
        if isinstance(ids, (list, tuple)):
            return [int(i) for i in ids]  # type: ignore[reportUnknownVariableType]
    return []


class TransitionSampleBuilder:
    """One sample per triplet (LLM call); every sample of a rollout carries the rollout's reward."""

    def build(self, rollout: FinishedRollout) -> list[TokenSample]:
        samples: list[TokenSample] = []
        for turn_index, triplet in enumerate(rollout.triplets):
            response_ids = _ids(triplet.response)
            samples.append(
                TokenSample(
                    prompt_ids=_ids(triplet.prompt),
                    response_ids=response_ids,
                    response_mask=[1] * len(response_ids),
                    reward=rollout.reward,
                    data_id=rollout.data_id,
                    rollout_id=rollout.rollout_id,
                    turn_index=turn_index,
                )
            )
        return samples


class TrajectorySampleBuilder:
    """One sample per run of calls that continue each other (prefix matching on token ids).

    When call k+1's prompt starts with call k's prompt + response, the tokens in between (tool results,
    user turns, template tokens) join the response with mask 0 and call k+1's response follows with mask 1.
    A call whose prompt does not extend the running sequence starts a new sample (`mismatches` counts them).
    """

    def __init__(self, mismatch_log_dir: Optional[str] = None) -> None:
        self.mismatches = 0
        self.mismatch_log_dir = mismatch_log_dir

    def build(self, rollout: FinishedRollout) -> list[TokenSample]:
        samples: list[TokenSample] = []
        current: Optional[TokenSample] = None
        for turn_index, triplet in enumerate(rollout.triplets):
            prompt_ids, response_ids = _ids(triplet.prompt), _ids(triplet.response)
            if current is not None:
                so_far = current.prompt_ids + current.response_ids
                if prompt_ids[: len(so_far)] == so_far and so_far:
                    between = prompt_ids[len(so_far) :]
                    current.response_ids += between + response_ids
                    current.response_mask += [0] * len(between) + [1] * len(response_ids)
                    continue
                self.mismatches += 1
                self._log_mismatch(rollout, turn_index, so_far, prompt_ids)
            current = TokenSample(
                prompt_ids=prompt_ids,
                response_ids=list(response_ids),
                response_mask=[1] * len(response_ids),
                reward=rollout.reward,
                data_id=rollout.data_id,
                rollout_id=rollout.rollout_id,
                turn_index=turn_index,
            )
            samples.append(current)
        return samples

    def _log_mismatch(self, rollout: FinishedRollout, turn_index: int, so_far: list[int], prompt: list[int]) -> None:
        """With `mismatch_log_dir`, write the two sequences as JSON to see where a chat template re-renders."""
        if self.mismatch_log_dir is None:
            return
        import json
        import os

        os.makedirs(self.mismatch_log_dir, exist_ok=True)
        common = next(
            (i for i, (a, b) in enumerate(zip(so_far, prompt, strict=False)) if a != b), min(len(so_far), len(prompt))
        )
        path = os.path.join(self.mismatch_log_dir, f"{rollout.rollout_id}-turn{turn_index}.json")
        with open(path, "w") as handle:
            json.dump({"rollout_id": rollout.rollout_id, "turn": turn_index, "first_difference": common,
                       "previous_prompt_and_response": so_far, "prompt": prompt}, handle)  # fmt: skip


def make_sample_builder(level: str, mismatch_log_dir: Optional[str] = None) -> SampleBuilder:
    """The builder for `agentlightning.trace_aggregator.level` ("transition" or "trajectory")."""
    if level == "transition":
        return TransitionSampleBuilder()
    if level == "trajectory":
        return TrajectorySampleBuilder(mismatch_log_dir)
    raise ValueError(f"trace_aggregator.level must be 'transition' or 'trajectory', got {level!r}")


@dataclass
class TokenBatch:
    """Padded tensors (verl key names) and per-row metadata, before wrapping in a `DataProto`."""

    tensors: dict[str, torch.Tensor]
    non_tensors: dict[str, Any]
    n_truncated_responses: int
    n_prompts_too_long: int

    def __len__(self) -> int:
        return int(self.tensors["input_ids"].shape[0])

    def to_data_proto(self) -> Any:
        """The batch as verl's `DataProto` (needs the `verl` extra)."""
        from tensordict import TensorDict
        from verl.protocol import DataProto

        data = DataProto(batch=TensorDict(self.tensors, batch_size=len(self)))
        data.non_tensor_batch.update(self.non_tensors)
        return data


def build_batch(
    samples: Sequence[TokenSample],
    *,
    max_prompt_length: int,
    max_response_length: int,
    pad_token_id: int,
    device: Any = None,
) -> TokenBatch:
    """Pad `samples` into verl's tensors.

    Prompts longer than `max_prompt_length` keep their last tokens and are flagged in `is_drop_mask`
    (dropped by the trainer after advantages are computed, so group statistics still see them); longer
    responses are cut. `token_level_scores` holds each sample's reward on its last response token.
    """
    import numpy as np
    import torch

    if max_prompt_length < 1 or max_response_length < 1:
        raise ValueError(
            f"max_prompt_length and max_response_length must be >= 1, got {max_prompt_length}, {max_response_length}"
        )
    if not samples:
        raise ValueError("no samples to batch: every rollout failed or produced no LLM call with token ids")
    prompts, prompt_masks, responses, response_attention, response_masks = [], [], [], [], []
    drops: list[bool] = []
    truncated = 0
    for sample in samples:
        drops.append(len(sample.prompt_ids) > max_prompt_length)
        if len(sample.response_ids) > max_response_length:
            truncated += 1
        ids, mask = get_left_padded_ids_and_attention_mask(sample.prompt_ids, max_prompt_length, pad_token_id)
        prompts.append(ids)
        prompt_masks.append(mask)
        ids, mask = get_right_padded_ids_and_attention_mask(sample.response_ids, max_response_length, pad_token_id)
        responses.append(ids)
        response_attention.append(mask)
        trained = sample.response_mask[:max_response_length]
        response_masks.append(trained + [0] * (max_response_length - len(trained)))

    prompt_tensor = torch.tensor(prompts, dtype=torch.long, device=device)
    response_tensor = torch.tensor(responses, dtype=torch.long, device=device)
    attention_mask = torch.cat(
        [
            torch.tensor(prompt_masks, dtype=torch.long, device=device),
            torch.tensor(response_attention, dtype=torch.long, device=device),
        ],
        dim=-1,
    )
    position_ids = torch.clamp(torch.cumsum(attention_mask, dim=-1) - 1, min=0)
    response_attention_tensor = torch.tensor(response_attention, dtype=torch.long, device=device)
    scores = torch.zeros(len(samples), max_response_length, dtype=torch.float32, device=device)
    lengths = response_attention_tensor.sum(dim=-1)
    has_response = lengths > 0
    rows = torch.arange(len(samples), device=device)[has_response]
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32, device=device)
    scores[rows, lengths[has_response] - 1] = rewards[has_response]
    tensors = {
        "prompts": prompt_tensor,
        "responses": response_tensor,
        "input_ids": torch.cat([prompt_tensor, response_tensor], dim=-1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": torch.tensor(response_masks, dtype=torch.long, device=device),
        "is_drop_mask": torch.tensor(drops, dtype=torch.bool, device=device),
        "token_level_scores": scores,
    }
    non_tensors = {
        "data_id_list": np.array([s.data_id for s in samples], dtype=object),
        "rollout_id_list": np.array([s.rollout_id for s in samples], dtype=object),
        "turn_index_list": np.array([s.turn_index for s in samples], dtype=np.int64),
    }
    return TokenBatch(tensors, non_tensors, n_truncated_responses=truncated, n_prompts_too_long=sum(drops))
