"""`AgentOSRunner`: run each rollout under an Agent-OS kernel, so every tool call goes through its policy.

    from agent_os import KernelSpace, PolicyEngine

    engine = PolicyEngine()
    engine.add_constraint("sql-agent", ["database_query"])   # the tools this agent id may use
    kernel = KernelSpace(policy_engine=engine)
    kernel.register_tool("database_query", run_query)         # the executor the kernel calls

    runner = AgentOSRunner(kernel, fail_on_violation=False, emit_violations=True,
                           agent_id="sql-agent", reward_fn=PolicyReward(kernel))
    trainer = agl.Trainer(runner=runner, algorithm=...)

Inside the agent, `await current_session().call_tool("database_query", query=sql)` runs the tool through
the kernel (`call_tool_sync` in synchronous agents). A refused call does not run; it is recorded as an
`agentos.violation.*` annotation span (`emit_violations`), and either fails the rollout
(`fail_on_violation=True`: `PolicyViolationError`) or comes back as `ToolCallResult(allowed=False)` so the
agent can go on. With `reward_fn`, a float the agent returns is replaced by `reward_fn(reward, violations)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeVar

from agentlightning.contrib.agentos import (
    AgentOSSession,
    PolicyViolation,
    PolicyViolationError,
    ToolCallResult,
    check_kernel,
    current_session,
    reset_current_session,
    set_current_session,
    violations_from_spans,
)
from agentlightning.runner.agent import LitAgentRunner
from agentlightning.tracer.otel import OtelTracer

if TYPE_CHECKING:
    from agentlightning.litagent import LitAgent
    from agentlightning.tracer.base import Tracer
    from agentlightning.types import AttemptedRollout, NamedResources

__all__ = [
    "AgentOSRunner",
    "AgentOSSession",
    "PolicyViolation",
    "PolicyViolationError",
    "ToolCallResult",
    "current_session",
    "violations_from_spans",
]

T_task = TypeVar("T_task")

RewardFn = Callable[[float, Sequence[PolicyViolation]], float]


class AgentOSRunner(LitAgentRunner[T_task]):
    """A `LitAgentRunner` that opens an Agent-OS session on `kernel` around every rollout.

    Args:
        kernel: an `agent_os.KernelSpace`; its policy engine decides every tool call, its tool registry runs them.
        fail_on_violation: a refused tool call raises `PolicyViolationError` and fails the rollout (True), or
            returns a refused `ToolCallResult` and the agent continues (False, the default).
        emit_violations: record each violation as an `agentos.violation.*` annotation span.
        agent_id: the id the rollouts act as in the kernel (its policy engine's allow-list is keyed by it).
        reward_fn: `(task_reward, violations) -> reward` applied to a float the agent returns
            (e.g. `PolicyReward(kernel)`); None keeps the agent's reward.
        tracer: default `OtelTracer()`.
        **runner_kwargs: the other `LitAgentRunner` arguments (`max_rollouts`, `poll_interval`, ...).
    """

    def __init__(
        self,
        kernel: Any,
        fail_on_violation: bool = False,
        emit_violations: bool = True,
        *,
        agent_id: str = "agent",
        reward_fn: Optional[RewardFn] = None,
        tracer: Optional[Tracer] = None,
        **runner_kwargs: Any,
    ) -> None:
        check_kernel(kernel, "AgentOSRunner")
        if not isinstance(agent_id, str) or not agent_id:  # type: ignore[redundant-expr]
            raise ValueError(f"agent_id must be a non-empty string, got {agent_id!r}")
        if reward_fn is not None and not callable(reward_fn):
            raise TypeError(f"reward_fn must be callable (task_reward, violations) -> float, got {reward_fn!r}")
        super().__init__(tracer if tracer is not None else OtelTracer(), **runner_kwargs)
        self.kernel = kernel
        self.fail_on_violation = bool(fail_on_violation)
        self.emit_violations = bool(emit_violations)
        self.agent_id = agent_id
        self.reward_fn = reward_fn

    async def _invoke_agent(self, agent: LitAgent[T_task], rollout: AttemptedRollout, resources: NamedResources) -> Any:
        session = AgentOSSession(
            self.kernel,
            self.agent_id,
            rollout_id=rollout.rollout_id,
            attempt_id=rollout.attempt.attempt_id,
            fail_on_violation=self.fail_on_violation,
            emit_violations=self.emit_violations,
        )
        await session.open()
        token = set_current_session(session)
        try:
            result = await super()._invoke_agent(agent, rollout, resources)
        finally:
            reset_current_session(token)
            session.close()
        result = self._coerce_reward(result)
        if self.reward_fn is not None and isinstance(result, float):
            result = float(self.reward_fn(result, list(session.violations)))
        return result
