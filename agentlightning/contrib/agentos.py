"""Agent-OS policy enforcement for agent actions: the gate every governed action goes through.

Agent-OS (`pip install agentlightning[agentos]`, the `agent-os-kernel` package) checks actions against
named policies. Its working governance API in release 3.x is `agent_os.StatelessKernel`: policies are
dicts (`{"blocked_patterns": [...], "blocked_actions": [...], "require_approval": [...]}`), and
`kernel.execute(action, params, ExecutionContext(agent_id, policies=[...]))` answers with `success=False`
and `signal="SIGKILL"` for a violation. A SQL policy that denies DROP and DELETE is therefore
`StatelessKernel(policies={"sql": sql_deny_policy(["DROP", "DELETE"])})`.

`PolicyGate` is what an agent calls before acting: `await gate.check("database_query", {"query": sql})`.
A violation is recorded as an `agentlightning.annotation` span (`agentos.violation.*` attributes) when
`emit_violations` is on, and raises `PolicyViolation` when `fail_on_violation` is on; otherwise the agent
gets a verdict it can act on (e.g. tell the model the action was denied).
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from agentlightning.emitter.annotation import emit_annotation
from agentlightning.types.tracer import SpanLike

__all__ = [
    "VIOLATION_KEY",
    "PolicyViolation",
    "Verdict",
    "PolicyGate",
    "current_gate",
    "sql_deny_policy",
    "count_violations",
    "require_agent_os",
]

VIOLATION_KEY = "agentos.violation"
"""Attribute prefix of violation annotations: `agentos.violation.action`, `.reason`, `.policies`."""

_CURRENT: contextvars.ContextVar[Optional[PolicyGate]] = contextvars.ContextVar("agentos_gate", default=None)


def require_agent_os() -> Any:
    """The `agent_os` module, or an ImportError naming the extra."""
    try:
        import agent_os
    except ImportError as exc:
        raise ImportError(
            "Agent-OS support needs the agent-os-kernel package; install it with pip install 'agentlightning[agentos]'"
        ) from exc
    return agent_os


def sql_deny_policy(keywords: Sequence[str]) -> dict[str, Any]:
    """An Agent-OS policy dict that blocks SQL statements using any of `keywords` (e.g. DROP, DELETE).

    Agent-OS matches `blocked_patterns` as lower-case substrings of the JSON parameters; a trailing space
    keeps `DELETE` from matching a column such as `deleted_at`.
    """
    if not keywords or not all(isinstance(k, str) and k.strip() for k in keywords):
        raise ValueError(f"keywords must be non-empty strings, got {list(keywords)!r}")
    return {"blocked_patterns": [f"{k.strip().lower()} " for k in keywords]}


class PolicyViolation(RuntimeError):
    """An action the kernel denied, raised when the gate runs with `fail_on_violation=True`."""

    def __init__(self, action: str, reason: str) -> None:
        super().__init__(f"Agent-OS denied {action!r}: {reason}")
        self.action = action
        self.reason = reason


@dataclass
class Verdict:
    allowed: bool
    action: str
    reason: Optional[str] = None


@dataclass
class PolicyGate:
    """Checks actions against an Agent-OS kernel for one rollout and remembers the violations.

    Args:
        kernel: an `agent_os.StatelessKernel` (anything with the same async `execute(action, params, context)`).
        policies: policy names enforced (default: every policy the kernel defines).
        agent_id: the id the kernel sees (default: the rollout id).
        fail_on_violation: raise `PolicyViolation` instead of returning a denied verdict.
        emit_violations: record each violation as an annotation span of the rollout.
    """

    kernel: Any
    policies: Optional[Sequence[str]] = None
    agent_id: str = "agent"
    fail_on_violation: bool = False
    emit_violations: bool = True
    violations: list[Verdict] = field(default_factory=list)
    checked: int = 0

    def policy_names(self) -> list[str]:
        if self.policies is not None:
            return list(self.policies)
        return [name for name in getattr(self.kernel, "policies", {}) or {}]

    async def check(self, action: str, params: dict[str, Any]) -> Verdict:
        """Ask the kernel whether `action` with `params` is allowed."""
        agent_os = require_agent_os()
        context = agent_os.ExecutionContext(agent_id=self.agent_id, policies=self.policy_names())
        result = await self.kernel.execute(action, params, context)
        self.checked += 1
        if getattr(result, "success", False):
            return Verdict(allowed=True, action=action)
        reason = str(getattr(result, "error", None) or "denied")
        if getattr(result, "signal", None) != "SIGKILL":
            # SIGTERM: the kernel's own execution failed; that is not a policy decision.
            return Verdict(allowed=True, action=action, reason=f"kernel error ignored: {reason}")
        verdict = Verdict(allowed=False, action=action, reason=reason)
        self.violations.append(verdict)
        if self.emit_violations:
            emit_annotation(
                {
                    VIOLATION_KEY: {
                        "action": action,
                        "reason": reason,
                        "policies": ",".join(self.policy_names()),
                        "params": _brief(params),
                    }
                }
            )
        if self.fail_on_violation:
            raise PolicyViolation(action, reason)
        return verdict


def current_gate() -> PolicyGate:
    """The gate of the rollout running in this context (set by `AgentOSRunner`)."""
    gate = _CURRENT.get()
    if gate is None:
        raise RuntimeError(
            "no Agent-OS gate is active; run the agent with agentlightning.contrib.runner.agentos.AgentOSRunner"
        )
    return gate


def _set_gate(gate: Optional[PolicyGate]) -> contextvars.Token[Optional[PolicyGate]]:
    return _CURRENT.set(gate)


def _reset_gate(token: contextvars.Token[Optional[PolicyGate]]) -> None:
    _CURRENT.reset(token)


def _brief(params: dict[str, Any], limit: int = 300) -> str:
    text = re.sub(r"\s+", " ", str(params))
    return text if len(text) <= limit else text[:limit] + "..."


def count_violations(spans: Iterable[SpanLike]) -> int:
    """Violation annotations among a rollout's spans."""
    key = f"{VIOLATION_KEY}.action"
    return sum(1 for span in spans if key in (getattr(span, "attributes", None) or {}))
