"""`AgentOSRunner`: a `LitAgentRunner` that puts every rollout under an Agent-OS kernel's policies.

For each rollout the runner opens a `PolicyGate` on the kernel (agent id = the rollout id) and makes it
the agent's `current_gate()`. The agent sends each governed action through it before acting
(`await current_gate().check("database_query", {"query": sql})`); violations become annotation spans of
the rollout (`emit_violations`) and, with `fail_on_violation`, fail the attempt.
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from typing import Any, Optional

from agentlightning.contrib.agentos import PolicyGate, _reset_gate, _set_gate, require_agent_os  # pyright: ignore[reportPrivateUsage]
from agentlightning.runner.agent import LitAgentRunner
from agentlightning.types import Hook

__all__ = ["AgentOSRunner"]


class _GateHook(Hook):
    """Opens a gate when a rollout starts and closes it when the rollout ends."""

    def __init__(self, runner: AgentOSRunner) -> None:
        self.runner = runner
        self._token: Optional[contextvars.Token[Optional[PolicyGate]]] = None

    async def on_rollout_start(self, *, agent: Any, runner: Any, rollout: Any) -> None:
        gate = PolicyGate(
            kernel=self.runner.kernel,
            policies=self.runner.policies,
            agent_id=str(rollout.rollout_id),
            fail_on_violation=self.runner.fail_on_violation,
            emit_violations=self.runner.emit_violations,
        )
        self.runner.last_gate = gate
        self._token = _set_gate(gate)

    async def on_rollout_end(self, *, agent: Any, runner: Any, rollout: Any, spans: Any) -> None:
        if self._token is not None:
            _reset_gate(self._token)
            self._token = None


class AgentOSRunner(LitAgentRunner[Any]):
    """Run agents under an Agent-OS kernel (`agent_os.StatelessKernel`).

    Args:
        kernel: the kernel whose policies govern the agent's actions.
        fail_on_violation: a denied action raises `PolicyViolation` (the attempt fails) instead of
            returning a denied verdict the agent can handle.
        emit_violations: record each violation as an `agentos.violation.*` annotation span.
        policies: the kernel's policy names to enforce (default: all of them).
        tracer: the tracer (default `OtelTracer()`); other keyword arguments go to `LitAgentRunner`.
    """

    def __init__(
        self,
        kernel: Any,
        fail_on_violation: bool = False,
        emit_violations: bool = True,
        *,
        policies: Optional[Sequence[str]] = None,
        tracer: Any = None,
        **runner_kwargs: Any,
    ) -> None:
        require_agent_os()
        if not callable(getattr(kernel, "execute", None)):
            raise TypeError(f"kernel must be an Agent-OS kernel with execute(), got {type(kernel).__name__}")
        known = set(getattr(kernel, "policies", {}) or {})
        unknown = [p for p in policies or [] if p not in known]
        if unknown:
            raise ValueError(f"policies {unknown} are not defined by the kernel; it defines {sorted(known)}")
        if tracer is None:
            from agentlightning.tracer.otel import OtelTracer

            tracer = OtelTracer()
        super().__init__(tracer, **runner_kwargs)
        self.kernel = kernel
        self.fail_on_violation = fail_on_violation
        self.emit_violations = emit_violations
        self.policies = list(policies) if policies is not None else None
        self.last_gate: Optional[PolicyGate] = None
        """The gate of the latest rollout (its `violations` and `checked` counts)."""

    def init(self, agent: Any, *, hooks: Optional[Sequence[Hook]] = None, **kwargs: Any) -> None:
        super().init(agent, hooks=[_GateHook(self), *(hooks or [])], **kwargs)
