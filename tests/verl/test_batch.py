"""Padding helpers and batch building, checked by hand on a small case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentlightning.types import Triplet
from agentlightning.verl.batch import (
    FinishedRollout,
    TrajectorySampleBuilder,
    TransitionSampleBuilder,
    build_batch,
    make_sample_builder,
)
from agentlightning.verl.padding import get_left_padded_ids_and_attention_mask, get_right_padded_ids_and_attention_mask

torch = pytest.importorskip("torch", reason="the verl batch tensors need torch (train extra)")


def test_left_padding_keeps_the_end_of_long_prompts() -> None:
    assert get_left_padded_ids_and_attention_mask([7, 8], 4, 0) == ([0, 0, 7, 8], [0, 0, 1, 1])
    assert get_left_padded_ids_and_attention_mask([1, 2, 3, 4, 5], 3, 0) == ([3, 4, 5], [1, 1, 1])
    assert get_left_padded_ids_and_attention_mask([], 2, 9) == ([9, 9], [0, 0])


def test_right_padding_keeps_the_start_of_long_responses() -> None:
    assert get_right_padded_ids_and_attention_mask([7, 8], 4, 0) == ([7, 8, 0, 0], [1, 1, 0, 0])
    assert get_right_padded_ids_and_attention_mask([1, 2, 3, 4, 5], 3, 0) == ([1, 2, 3], [1, 1, 1])


def test_padding_rejects_a_zero_length() -> None:
    with pytest.raises(ValueError, match="max_length"):
        get_left_padded_ids_and_attention_mask([1], 0, 0)


def _rollout(rollout_id: str, data_id: str, reward: float, calls: list[tuple[list[int], list[int]]]) -> FinishedRollout:
    triplets = [Triplet(prompt={"token_ids": p}, response={"token_ids": r}) for p, r in calls]
    return FinishedRollout(rollout_id, data_id, "succeeded", reward, triplets)


def test_transition_batch_small_case_by_hand() -> None:
    a = _rollout("ro-a", "d1", 1.0, [([11, 12], [21, 22, 23]), ([11, 12, 21, 22, 23, 13], [24])])
    b = _rollout("ro-b", "d1", -0.5, [([11, 12, 14, 15, 16], [25, 26, 27, 28, 29])])
    builder = TransitionSampleBuilder()
    samples = builder.build(a) + builder.build(b)
    batch = build_batch(samples, max_prompt_length=4, max_response_length=3, pad_token_id=0)
    t = batch.tensors

    assert t["prompts"].tolist() == [[0, 0, 11, 12], [21, 22, 23, 13], [12, 14, 15, 16]]
    assert t["responses"].tolist() == [[21, 22, 23], [24, 0, 0], [25, 26, 27]]
    assert t["input_ids"].tolist() == [
        [0, 0, 11, 12, 21, 22, 23],
        [21, 22, 23, 13, 24, 0, 0],
        [12, 14, 15, 16, 25, 26, 27],
    ]
    assert t["attention_mask"].tolist() == [
        [0, 0, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1, 1],
    ]
    assert t["position_ids"].tolist() == [
        [0, 0, 0, 1, 2, 3, 4],
        [0, 1, 2, 3, 4, 4, 4],
        [0, 1, 2, 3, 4, 5, 6],
    ]
    assert t["response_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 1]]
    # The reward sits on the last real response token; both calls of rollout a carry its reward.
    assert t["token_level_scores"].tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, -0.5]]
    # Call 2 of a (6 prompt tokens) and b (5) have prompts over 4 tokens: kept, flagged for dropping.
    assert t["is_drop_mask"].tolist() == [False, True, True]
    assert batch.n_prompts_too_long == 2 and batch.n_truncated_responses == 1
    assert batch.non_tensors["rollout_id_list"].tolist() == ["ro-a", "ro-a", "ro-b"]
    assert batch.non_tensors["turn_index_list"].tolist() == [0, 1, 0]
    assert batch.non_tensors["data_id_list"].tolist() == ["d1", "d1", "d1"]


def test_trajectory_builder_merges_continuing_calls_and_masks_the_tokens_in_between(tmp_path: Path) -> None:
    rollout = _rollout(
        "ro-t",
        "d2",
        2.0,
        [([1, 2], [3, 4]), ([1, 2, 3, 4, 5, 6], [7]), ([9, 9], [8])],  # the last call does not continue
    )
    builder = TrajectorySampleBuilder(mismatch_log_dir=str(tmp_path / "mismatches"))
    samples = builder.build(rollout)
    assert [(s.prompt_ids, s.response_ids, s.response_mask, s.turn_index) for s in samples] == [
        ([1, 2], [3, 4, 5, 6, 7], [1, 1, 0, 0, 1], 0),
        ([9, 9], [8], [1], 2),
    ]
    assert builder.mismatches == 1
    (logged,) = (tmp_path / "mismatches").iterdir()
    assert logged.name == "ro-t-turn2.json"
    assert json.loads(logged.read_text())["first_difference"] == 0
    batch = build_batch(samples, max_prompt_length=2, max_response_length=6, pad_token_id=0)
    assert batch.tensors["response_mask"].tolist() == [[1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 0, 0]]
    assert batch.tensors["token_level_scores"].tolist() == [[0, 0, 0, 0, 2.0, 0], [2.0, 0, 0, 0, 0, 0]]


def test_rollout_without_token_ids_yields_empty_rows_without_a_score() -> None:
    rollout = FinishedRollout("ro-x", "d", "succeeded", 1.0, [Triplet(prompt={"text": "hi"}, response={})])
    batch = build_batch(
        TransitionSampleBuilder().build(rollout), max_prompt_length=2, max_response_length=2, pad_token_id=0
    )
    assert batch.tensors["attention_mask"].tolist() == [[0, 0, 0, 0]]
    assert batch.tensors["token_level_scores"].tolist() == [[0.0, 0.0]]


def test_empty_batches_and_bad_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="no samples"):
        build_batch([], max_prompt_length=2, max_response_length=2, pad_token_id=0)
    sample = TransitionSampleBuilder().build(_rollout("r", "d", 0.0, [([1], [2])]))
    with pytest.raises(ValueError, match="max_response_length"):
        build_batch(sample, max_prompt_length=2, max_response_length=0, pad_token_id=0)
    with pytest.raises(ValueError, match="trajectory"):
        make_sample_builder("episode")


def test_data_proto_wraps_the_same_tensors() -> None:
    pytest.importorskip("verl", reason="DataProto comes from the verl extra (the Makefile installs verl --no-deps)")
    sample = TransitionSampleBuilder().build(_rollout("r", "d", 0.5, [([1, 2], [3])]))
    batch = build_batch(sample, max_prompt_length=2, max_response_length=2, pad_token_id=0)
    proto = batch.to_data_proto()
    assert len(proto) == 1
    assert proto.batch["token_level_scores"].tolist() == [[0.5, 0.0]]
    assert proto.non_tensor_batch["data_id_list"].tolist() == ["d"]


def test_gpu_only_names_explain_the_missing_extra() -> None:
    import importlib.util

    import agentlightning.verl as agl_verl

    assert agl_verl.AgentModeDaemon.__name__ == "AgentModeDaemon"
    assert agl_verl.get_left_padded_ids_and_attention_mask is get_left_padded_ids_and_attention_mask
    if importlib.util.find_spec("codetiming") is None:  # verl's trainer stack is absent on CPU machines
        with pytest.raises(
            ImportError, match=r"AgentLightningTrainer needs verl with its GPU stack.*agentlightning\[verl\]"
        ):
            agl_verl.AgentLightningTrainer  # noqa: B018
