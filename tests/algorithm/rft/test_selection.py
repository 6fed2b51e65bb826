"""RFT's selection: the best of each group (above a threshold or the group's worst), or all above a threshold."""

from __future__ import annotations

import pytest

from agentlightning.algorithm.rft import RFTConfig, ScoredRollout, select_rollouts


def _rollouts(*groups: list[float]) -> list[ScoredRollout]:
    return [
        ScoredRollout(f"ro-{g}-{i}", f"task-{g}", reward)
        for g, rewards in enumerate(groups)
        for i, reward in enumerate(rewards)
    ]


def ids(selected: list[ScoredRollout]) -> list[str]:
    return [r.rollout_id for r in selected]


def test_best_per_group_keeps_each_groups_best_unless_the_group_is_tied() -> None:
    rollouts = _rollouts([0.1, 0.9, 0.9, 0.0], [0.2, 0.2, 0.2], [0.0, 1.0])
    # Ties go to the earlier rollout; the all-tied group 1 shows nothing to prefer.
    assert ids(select_rollouts(rollouts)) == ["ro-0-1", "ro-2-1"]
    assert ids(select_rollouts(rollouts, keep_per_group=2)) == ["ro-0-1", "ro-0-2", "ro-2-1"]


def test_a_threshold_bounds_the_best_and_selects_on_its_own() -> None:
    rollouts = _rollouts([0.1, 0.9, 0.9, 0.0], [1.0, 1.0], [0.5, 0.4])
    assert ids(select_rollouts(rollouts, reward_threshold=0.9)) == ["ro-0-1", "ro-1-0"]
    assert ids(select_rollouts(rollouts, selection="threshold", reward_threshold=0.9)) == [
        "ro-0-1",
        "ro-0-2",
        "ro-1-0",
        "ro-1-1",
    ]
    assert select_rollouts(rollouts, selection="threshold", reward_threshold=2.0) == []


def test_bad_settings_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="needs reward_threshold"):
        select_rollouts(_rollouts([1.0]), selection="threshold")
    with pytest.raises(ValueError, match="'best_per_group' or 'threshold'"):
        select_rollouts(_rollouts([1.0]), selection="top")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs reward_threshold"):
        RFTConfig(selection="threshold")
    with pytest.raises(ValueError, match="rounds=0"):
        RFTConfig(rounds=0)
    with pytest.raises(TypeError, match="unknown RFTConfig fields"):
        RFTConfig.from_dict({"steps": 3})
    assert RFTConfig(rounds=3, tasks_per_round=5).learner_config().total_steps == 3
