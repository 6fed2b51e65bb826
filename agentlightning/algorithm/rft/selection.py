"""Which sampled rollouts RFT fine-tunes on: the best of each group, or every one above a reward threshold."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal, Optional

__all__ = ["Selection", "ScoredRollout", "select_rollouts"]

Selection = Literal["best_per_group", "threshold"]


@dataclass(frozen=True)
class ScoredRollout:
    """A finished rollout, the group (task) it was sampled for, and its return."""

    rollout_id: str
    group_id: Hashable
    reward: float


def select_rollouts(
    rollouts: Sequence[ScoredRollout],
    *,
    selection: Selection = "best_per_group",
    reward_threshold: Optional[float] = None,
    keep_per_group: int = 1,
) -> list[ScoredRollout]:
    """The rollouts to fine-tune on, in the order given.

    - "best_per_group": in each group, the `keep_per_group` rollouts with the highest return (earlier ones
      first among equals), each only if it reaches `reward_threshold`, or, without a threshold, if it beats
      the group's worst rollout: a group whose rollouts all scored the same shows nothing to prefer.
    - "threshold": every rollout whose return reaches `reward_threshold` (required), however many per group.
    """
    if selection == "threshold":
        if reward_threshold is None:
            raise ValueError("selection='threshold' needs reward_threshold=<minimum return to keep a rollout>")
        return [r for r in rollouts if r.reward >= reward_threshold]
    if selection != "best_per_group":
        raise ValueError(f"selection must be 'best_per_group' or 'threshold', got {selection!r}")
    if keep_per_group < 1:
        raise ValueError(f"keep_per_group must be >= 1, got {keep_per_group}")
    groups: dict[Hashable, list[tuple[int, ScoredRollout]]] = {}
    for index, rollout in enumerate(rollouts):
        groups.setdefault(rollout.group_id, []).append((index, rollout))
    chosen: set[int] = set()
    for members in groups.values():
        worst = min(r.reward for _i, r in members)
        ranked = sorted(members, key=lambda item: (-item[1].reward, item[0]))
        for index, rollout in ranked[:keep_per_group]:
            good_enough = rollout.reward >= reward_threshold if reward_threshold is not None else rollout.reward > worst
            if good_enough:
                chosen.add(index)
    return [rollout for index, rollout in enumerate(rollouts) if index in chosen]
