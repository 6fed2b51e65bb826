"""`PolicyReward`: the task reward minus a penalty per Agent-OS policy violation of the rollout."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from agentlightning.contrib.agentos import count_violations, current_gate
from agentlightning.types.tracer import SpanLike

__all__ = ["PolicyReward"]


class PolicyReward:
    """Combine a task reward with the rollout's violations: `task_reward - penalty * violations`.

    Args:
        kernel: the kernel the violations come from; a gate on another kernel is an error.
        penalty: subtracted per violation (> 0).
        floor: lowest reward returned (None: no floor).
    """

    def __init__(self, kernel: Any, penalty: float = 1.0, floor: Optional[float] = None) -> None:
        if not penalty > 0:
            raise ValueError(f"penalty must be > 0, got {penalty}")
        self.kernel = kernel
        self.penalty = penalty
        self.floor = floor

    def __call__(self, task_reward: float, spans: Optional[Iterable[SpanLike]] = None) -> float:
        """The combined reward; violations are counted in `spans`, else taken from the running rollout's gate."""
        if spans is not None:
            violations = count_violations(spans)
        else:
            gate = current_gate()
            if gate.kernel is not self.kernel:
                raise ValueError("the running rollout's gate uses another kernel than this PolicyReward")
            violations = len(gate.violations)
        reward = float(task_reward) - self.penalty * violations
        return reward if self.floor is None else max(self.floor, reward)
