"""`PolicyReward`: Agent-OS policy violations as negative rewards, combined with the task reward.

    reward = PolicyReward(kernel, penalty=1.0)
    combined = reward(task_reward)                # inside a rollout run by AgentOSRunner
    combined = reward(task_reward, violations=2)  # anywhere, with an explicit count or list
    combined = reward.from_spans(spans)           # offline, from a stored rollout's spans

`combined = task_reward - min(penalty * n_violations, max_penalty)`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Optional, Union

from agentlightning.contrib.agentos import (
    PolicyViolation,
    check_kernel,
    current_session,
    violations_from_spans,
)
from agentlightning.emitter import find_final_reward
from agentlightning.types import SpanLike

__all__ = ["PolicyReward", "PolicyViolation"]

Violations = Union[int, Sequence[PolicyViolation]]


class PolicyReward:
    """Combine a task reward with a penalty per violation of `kernel`'s policy.

    Args:
        kernel: the Agent-OS `KernelSpace` the agent's tools run under (the same one given to `AgentOSRunner`);
            without an explicit count the violations are those of the current rollout on this kernel.
        penalty: subtracted per violation (>= 0).
        max_penalty: cap of the total penalty (None: no cap).
    """

    def __init__(self, kernel: Any, *, penalty: float = 1.0, max_penalty: Optional[float] = None) -> None:
        check_kernel(kernel, "PolicyReward")
        if not _finite(penalty) or penalty < 0:
            raise ValueError(f"penalty must be a finite number >= 0, got {penalty!r}")
        if max_penalty is not None and (not _finite(max_penalty) or max_penalty < 0):
            raise ValueError(f"max_penalty must be None or a finite number >= 0, got {max_penalty!r}")
        self.kernel = kernel
        self.penalty = float(penalty)
        self.max_penalty = None if max_penalty is None else float(max_penalty)

    def penalty_for(self, violations: Violations) -> float:
        """The (capped) penalty for a count or a list of violations."""
        count = _count(violations)
        total = self.penalty * count
        return min(total, self.max_penalty) if self.max_penalty is not None else total

    def __call__(self, task_reward: float, violations: Optional[Violations] = None) -> float:
        """`task_reward` minus the penalty; `violations=None` reads the current rollout's session on this kernel."""
        if not _finite(task_reward):
            raise ValueError(f"task_reward must be a finite number, got {task_reward!r}")
        if violations is None:
            session = current_session()
            if session.kernel is not self.kernel:
                raise RuntimeError(
                    "the current rollout runs under another Agent-OS kernel than this PolicyReward's; "
                    "build PolicyReward with the kernel given to AgentOSRunner"
                )
            violations = session.violations
        return float(task_reward) - self.penalty_for(violations)

    def from_spans(self, spans: Iterable[SpanLike], task_reward: Optional[float] = None) -> Optional[float]:
        """The combined reward of a stored rollout: its violation spans against `task_reward`.

        Without `task_reward`, the rollout's final reward span is used (None when it has none). Use this on
        spans whose reward is the *task* reward (a runner without `reward_fn`), or the penalty counts twice.
        """
        span_list = list(spans)
        if task_reward is None:
            task_reward = find_final_reward(span_list)
            if task_reward is None:
                return None
        return self(task_reward, violations_from_spans(span_list))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(violations: Violations) -> int:
    if isinstance(violations, bool):
        raise TypeError("violations must be a count or a list of PolicyViolation, got a bool")
    if isinstance(violations, int):
        if violations < 0:
            raise ValueError(f"violations must be >= 0, got {violations}")
        return violations
    if isinstance(violations, (str, bytes)) or not isinstance(violations, Sequence):  # type: ignore[redundant-expr]
        raise TypeError(f"violations must be a count or a list of PolicyViolation, got {type(violations).__name__}")
    return len(violations)
