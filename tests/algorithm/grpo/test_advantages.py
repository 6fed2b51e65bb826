"""Turn returns and group-normalised advantages, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest

from agentlightning.algorithm.grpo.advantages import group_advantages, step_advantages, turn_returns


def test_turn_returns_discount_later_rewards() -> None:
    assert turn_returns([None, None, 1.0]) == [1.0, 1.0, 1.0]
    assert turn_returns([None, None, 1.0], gamma=0.5) == [0.25, 0.5, 1.0]
    assert turn_returns([0.5, None, 1.0], gamma=0.5) == [0.75, 0.5, 1.0]


def test_rollouts_without_any_reward_get_the_fill_value_on_the_last_turn() -> None:
    assert turn_returns([None, None], fill_value=-1.0) == [-1.0, -1.0]
    assert turn_returns([]) == []


def test_group_advantages_are_centred_and_scaled_per_group() -> None:
    returns = [[1.0], [0.0], [0.0], [1.0], [5.0], [5.0]]
    groups = ["a", "a", "a", "a", "b", "b"]
    advantages = group_advantages(returns, groups, eps=0.0)
    std = math.sqrt(sum((r - 0.5) ** 2 for r in [1, 0, 0, 1]) / 3)  # unbiased, as in TRL/VERL
    assert [a[0] for a in advantages[:4]] == pytest.approx([0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std])
    assert advantages[4:] == [[0.0], [0.0]]  # equal rewards: no signal


def test_centring_only_and_groups_of_one() -> None:
    assert group_advantages([[3.0], [1.0]], [0, 0], scale=False) == [[1.0], [-1.0]]
    assert group_advantages([[3.0]], [0]) == [[0.0]]


def test_every_turn_is_measured_against_the_group_mean_of_total_returns() -> None:
    # Two rollouts of one task: 2 turns (returns 1.0, 1.0) and 1 turn (return 0.0). mean 0.5, std sqrt(0.5).
    advantages = group_advantages([[1.0, 1.0], [0.0]], ["t", "t"], eps=0.0)
    expected = 0.5 / math.sqrt(0.5)
    assert advantages == [[pytest.approx(expected), pytest.approx(expected)], [pytest.approx(-expected)]]


def test_mismatched_lengths_are_an_error() -> None:
    with pytest.raises(ValueError, match="group ids"):
        group_advantages([[1.0]], [])


def test_step_advantages_normalise_returns_among_turns_that_saw_the_same_observation() -> None:
    # Two rollouts of one task: the same first observation "task", then both see "X" (anchor) and one sees "Y".
    returns = [[1.0, 1.0, 0.0], [1.0, 0.0], [0.5, 0.5]]
    observations = [["task", "X", "Y"], ["task", "X"], ["task", "Z"]]
    steps = step_advantages(returns, observations, ["g", "g", "g"], scale=False)
    assert steps[0] == pytest.approx([1 / 6, 0.5, 0.0])  # "task": mean 5/6; "X": mean 0.5; "Y" alone -> 0
    assert steps[1] == pytest.approx([1 / 6, -0.5])
    assert steps[2] == pytest.approx([-1 / 3, 0.0])
    # Other groups never share anchors, even with equal observations.
    assert step_advantages([[1.0], [0.0]], [["X"], ["X"]], ["a", "b"]) == [[0.0], [0.0]]
    with pytest.raises(ValueError, match="observations"):
        step_advantages([[1.0, 2.0]], [["X"]], ["g"])
