"""Triplets -> samples -> padded token batches; the loss mask covers response tokens only."""

from __future__ import annotations

import pytest
import torch

from agentlightning.algorithm.grpo.batch import (
    RolloutTriplets,
    Sample,
    collate,
    rollout_row_weights,
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
    samples = samples_from_rollouts(
        rollouts, aggregation="transition", advantage_level="turn", scale_advantages=False, stats=stats
    )
    assert [(s.rollout_id, s.response_ids, s.advantage) for s in samples] == [
        ("ro-1", [3], 0.5),
        ("ro-1", [5], 0.5),
        ("ro-2", [9], -0.5),
    ]
    assert stats["triplets"] == 4 and stats["skipped_triplets"] == 1 and stats["rows"] == 3
    assert stats["rollouts_without_samples"] == 0


def test_final_reward_overrides_the_last_triplet_and_discount_applies() -> None:
    rollout = RolloutTriplets("ro", "g", [_triplet([1], [2]), _triplet([1], [3])], final_reward=1.0)
    samples = samples_from_rollouts(
        [rollout], aggregation="transition", advantage_level="turn", turn_discount=0.5, scale_advantages=False
    )
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


def test_trajectory_rows_merge_continuous_calls_and_carry_the_rollout_advantage() -> None:
    good = RolloutTriplets(
        "ro-good",
        "task",
        [
            _triplet([1, 2], [3], logprobs=[-0.3]),
            _triplet([1, 2, 3, 4], [5], logprobs=[-0.5]),  # continues: 4 is a tool result
            _triplet([7, 7, 7], [8], logprobs=[-0.8]),  # unrelated prompt: a new row
        ],
        final_reward=1.0,
    )
    bad = RolloutTriplets("ro-bad", "task", [_triplet([1, 2], [9])], final_reward=0.0)
    stats: dict[str, int] = {}
    samples = samples_from_rollouts([good, bad], scale_advantages=False, stats=stats)
    assert [(s.rollout_id, s.prompt_ids, s.response_ids, s.loss_mask, s.turns) for s in samples] == [
        ("ro-good", [1, 2], [3, 4, 5], [1, 0, 1], 2),
        ("ro-good", [7, 7, 7], [8], None, 1),
        ("ro-bad", [1, 2], [9], None, 1),
    ]
    # One advantage per rollout, on every row: (1 - 0.5) and (0 - 0.5).
    assert [s.advantage for s in samples] == [0.5, 0.5, -0.5]
    assert samples[0].old_logprobs == [-0.3, 0.0, -0.5] and samples[2].old_logprobs is None
    assert stats["triplets"] == 4 and stats["rows"] == 3 and stats["breaks_other"] == 1
    assert stats["breaks_chat_template"] == 0 and stats["breaks_retokenization"] == 0
    transition = samples_from_rollouts([good, bad], aggregation="transition", scale_advantages=False)
    assert len(transition) == 4 and all(s.loss_mask is None for s in transition)


def test_row_limits_drop_long_prompts_and_cut_long_responses_and_count_both() -> None:
    rollout = RolloutTriplets(
        "ro",
        "g",
        [
            _triplet([1, 2], [3, 4, 5], logprobs=[-1.0, -2.0, -3.0]),
            _triplet([1, 2, 3, 4, 5, 6], [7], logprobs=[-7.0]),
            _triplet([9, 9, 9, 9, 9], [8]),  # a new row whose prompt is too long
        ],
        final_reward=1.0,
    )
    stats: dict[str, int] = {}
    (sample,) = samples_from_rollouts([rollout], max_prompt_length=4, max_response_length=4, stats=stats)
    assert sample.response_ids == [3, 4, 5, 6] and sample.loss_mask == [1, 1, 1, 0]
    assert sample.old_logprobs == [-1.0, -2.0, -3.0, 0.0] and sample.trained_tokens == 3
    assert stats["rows_dropped_prompt_too_long"] == 1 and stats["rows_truncated"] == 1 and stats["rows"] == 1
    # Every generated token is trained or counted where it was lost: 5 = 3 trained + 1 cut + 1 too long.
    assert (stats["tokens_truncated"], stats["tokens_prompt_too_long"]) == (1, 1)
    assert sample.trained_tokens + stats["tokens_truncated"] + stats["tokens_prompt_too_long"] == 3 + 1 + 1
    with pytest.raises(ValueError, match="aggregation"):
        samples_from_rollouts([rollout], aggregation="steps")  # type: ignore[arg-type]


def test_collate_trains_only_generated_tokens_of_a_merged_row() -> None:
    merged = Sample(prompt_ids=[1], response_ids=[2, 3, 4], advantage=1.0, loss_mask=[1, 0, 1], rollout_id="a")
    single = Sample(prompt_ids=[1], response_ids=[5], advantage=1.0, rollout_id="a")
    other = Sample(prompt_ids=[1], response_ids=[6, 7], advantage=1.0, rollout_id="b")
    assert rollout_row_weights([merged, single, other]) == [1 / 3, 1 / 3, 1 / 2]
    batch = collate([merged, single, other], pad_token_id=0, row_weights=rollout_row_weights([merged, single, other]))
    assert batch.response_mask.tolist() == [[0, 1, 0, 1], [0, 1, 0, 0], [0, 1, 1, 0]]
    assert batch.row_weights.tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 2])
    cut = truncate_sample(merged, max_prompt_length=5, max_response_length=2)
    assert cut.loss_mask == [1, 0]


def test_a_rollout_without_triplets_or_reward_yields_no_rows_and_is_counted() -> None:
    stats: dict[str, int] = {}
    empty = RolloutTriplets("ro-empty", "g", [])
    other = RolloutTriplets("ro", "g", [_triplet([1], [2])], final_reward=1.0)
    for weight in (0.0, 1.0):
        samples = samples_from_rollouts([empty, other], step_advantage_weight=weight, stats=stats)
        assert [s.rollout_id for s in samples] == ["ro"]
    assert stats["rollouts_without_samples"] == 2
