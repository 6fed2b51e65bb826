"""Triplets -> samples -> padded token batches; the loss mask covers response tokens only."""

from __future__ import annotations

import pytest
import torch

from agentlightning.algorithm.grpo.batch import (
    RolloutTriplets,
    Sample,
    collate,
    samples_from_rollouts,
    triplet_tokens,
    truncate_sample,
)
from agentlightning.types import Triplet

pytestmark = pytest.mark.train


def _triplet(prompt: list[int], response: list[int], reward: float | None = None, logprobs=None) -> Triplet:
    body = {"token_ids": response}
    if logprobs is not None:
        body["logprobs"] = logprobs
    return Triplet(prompt={"token_ids": prompt}, response=body, reward=reward)


def test_triplet_tokens_accepts_the_logprob_shapes_adapters_produce() -> None:
    content = {"content": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -1.0}]}
    assert triplet_tokens(_triplet([1], [5, 6], logprobs=content)) == ([1], [5, 6], [-0.5, -1.0])
    assert triplet_tokens(_triplet([1], [5, 6], logprobs=[-0.5, -1.0]))[2] == [-0.5, -1.0]  # type: ignore[index]
    assert triplet_tokens(_triplet([1], [5, 6], logprobs='[{"logprob": -0.5}, {"logprob": -1.0}]'))[2] == [-0.5, -1.0]  # type: ignore[index]
    # A length mismatch means the logprobs are unusable: recompute rather than train on wrong values.
    assert triplet_tokens(_triplet([1], [5, 6], logprobs=[-0.5]))[2] is None  # type: ignore[index]
    assert triplet_tokens(_triplet([], [5])) is None
    assert triplet_tokens(Triplet(prompt="text", response="text")) is None


def test_every_llm_call_becomes_a_sample_with_its_turn_advantage() -> None:
    rollouts = [
        RolloutTriplets("ro-1", "task", [_triplet([1, 2], [3]), _triplet([1, 2, 3, 4], [5], reward=1.0)]),
        RolloutTriplets("ro-2", "task", [_triplet([1, 2], [9], reward=0.0), Triplet(prompt={}, response={})]),
    ]
    stats: dict[str, int] = {}
    samples = samples_from_rollouts(rollouts, scale_advantages=False, stats=stats)
    assert [(s.rollout_id, s.response_ids, s.advantage) for s in samples] == [
        ("ro-1", [3], 0.5),
        ("ro-1", [5], 0.5),
        ("ro-2", [9], -0.5),
    ]
    assert stats == {"triplets": 4, "skipped_triplets": 1, "rollouts_without_samples": 0}


def test_final_reward_overrides_the_last_triplet_and_discount_applies() -> None:
    rollout = RolloutTriplets("ro", "g", [_triplet([1], [2]), _triplet([1], [3])], final_reward=1.0)
    samples = samples_from_rollouts([rollout], turn_discount=0.5, scale_advantages=False)
    assert [s.reward for s in samples] == [0.5, 1.0]


def test_collate_masks_prompt_and_padding_and_aligns_old_logprobs() -> None:
    samples = [
        Sample(prompt_ids=[1, 2, 3], response_ids=[4, 5], advantage=1.0, old_logprobs=[-0.1, -0.2]),
        Sample(prompt_ids=[1], response_ids=[6, 7, 8], advantage=-1.0),
    ]
    batch = collate(samples, pad_token_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5], [1, 6, 7, 8, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert batch.response_mask.tolist() == [[0, 0, 0, 1, 1], [0, 1, 1, 1, 0]]
    assert batch.old_logprobs[0].tolist() == pytest.approx([0, 0, 0, -0.1, -0.2])
    assert batch.advantages.tolist() == [1.0, -1.0]
    per_token = torch.arange(10, dtype=torch.float32).reshape(2, 5)
    assert batch.response_values(per_token) == [[3.0, 4.0], [6.0, 7.0, 8.0]]


def test_truncation_keeps_the_latest_prompt_and_the_first_response_tokens() -> None:
    sample = Sample(prompt_ids=[1, 2, 3, 4], response_ids=[5, 6, 7], advantage=0.0, old_logprobs=[-1.0, -2.0, -3.0])
    cut = truncate_sample(sample, max_prompt_length=2, max_response_length=2)
    assert (cut.prompt_ids, cut.response_ids, cut.old_logprobs) == ([3, 4], [5, 6], [-1.0, -2.0])
    assert truncate_sample(sample, 10, 10) is sample


def test_collate_refuses_an_empty_batch() -> None:
    with pytest.raises(ValueError, match="empty"):
        collate([], pad_token_id=0)
