"""GRPO groups: those in flight between async steps, the rule that drops a stale group whole, and the
filter that drops tied groups.

With `async_rollouts=True` a step trains only on complete GRPO groups (every sibling rollout terminal);
a group whose siblings are still running stays pending and is carried over to the next step. A group is
keyed `(step, slot)`: the step whose task batch it belongs to and the task's slot in that batch, so a
carried group never shares its advantage baseline with a group of a later step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, List, Sequence, Set, Tuple

from .batch import Sample

__all__ = ["GroupKey", "PendingGroup", "GroupTally", "drop_stale_groups", "drop_tied_groups", "has_advantage"]

GroupKey = Tuple[int, int]
"""(step, slot): the step whose `tasks_for_step` batch the group belongs to, and the task's place in it."""


@dataclass
class PendingGroup:
    """One task's `group_size` rollouts, enqueued and not yet trained on or dropped."""

    step: int
    slot: int
    task: Any
    rollout_ids: Dict[int, str]
    """By sample index (0 .. group_size - 1)."""
    enqueued_at: float
    """`time.perf_counter()` when its rollouts were enqueued (the start of their generation)."""
    reused: Set[int] = field(default_factory=lambda: set())
    """Samples found in the store on resume; replaced once if they failed (against the previous server)."""

    @property
    def key(self) -> GroupKey:
        return (self.step, self.slot)


@dataclass
class GroupTally:
    """Where a step's pending groups went; `carried_in + batch_size == trained + dropped + failed + carried_over`."""

    carried_in: int = 0
    """Pending from earlier steps when the step began."""
    trained: int = 0
    dropped_stale: int = 0
    """Complete, but a sample was more than `max_staleness` updates old: dropped whole."""
    failed: int = 0
    """Complete, but no rollout succeeded."""
    carried_over: int = 0
    """Still running when the step trained: pending for the next step."""

    def as_metrics(self) -> Dict[str, float]:
        return {
            "groups_carried_in": float(self.carried_in),
            "groups_trained": float(self.trained),
            "groups_dropped_stale": float(self.dropped_stale),
            "groups_failed": float(self.failed),
            "groups_carried_over": float(self.carried_over),
        }


def drop_stale_groups(
    samples: Sequence[Sample], version: int, max_staleness: int
) -> Tuple[List[Sample], Dict[str, float]]:
    """The samples of groups whose every sample is at most `max_staleness` updates behind `version`.

    A group is never split: one sample too old drops all of its group's samples (its advantages were
    normalised together). Returns the kept samples and the metrics: the staleness histogram over all
    samples (`staleness_<n>`), `samples_stale_dropped` and `groups_dropped_stale`. A sample without a
    recorded version counts as current.
    """
    histogram: Dict[str, float] = {}
    stale: Set[Hashable] = set()
    for sample in samples:
        behind = version - sample.policy_version if sample.policy_version is not None else 0
        key = f"staleness_{behind}"
        histogram[key] = histogram.get(key, 0.0) + 1.0
        if behind > max_staleness:
            stale.add(sample.group_id)
    kept = [s for s in samples if s.group_id not in stale]
    return kept, {
        **histogram,
        "samples_stale_dropped": float(len(samples) - len(kept)),
        "groups_dropped_stale": float(len(stale)),
    }


def has_advantage(sample: Sample, tolerance: float = 1e-6) -> bool:
    """Whether some token of the row has a nonzero advantage (beyond the rounding of a group mean)."""
    advantages = sample.token_advantages if sample.token_advantages is not None else [sample.advantage]
    return any(abs(a) > tolerance for a in advantages)


def drop_tied_groups(samples: Sequence[Sample], tolerance: float = 1e-6) -> Tuple[List[Sample], int]:
    """The samples of groups in which some row has a nonzero advantage, and how many groups were dropped.

    A group whose rollouts all earned the same return (and, with step credit, whose turns all tie too)
    has zero advantage on every token: it adds nothing to the policy gradient. The tolerance absorbs the
    rounding of a group mean (a mean of 0.1s is not exactly 0.1), far below any real reward difference.
    """
    informative = {s.group_id for s in samples if has_advantage(s, tolerance)}
    groups = {s.group_id for s in samples}
    return [s for s in samples if s.group_id in informative], len(groups - informative)
