"""Agent-OS governance shared by `AgentOSRunner` and `PolicyReward`: sessions, governed tool calls, violations.

An `AgentOSSession` is one rollout's view of an Agent-OS `KernelSpace` (the `agent-os-kernel` package):
it owns the kernel's agent context for the rollout, sends every tool call through the kernel's `SYS_EXEC`
syscall (so the kernel's policy engine decides), and keeps the violations the kernel reported. The
runner opens one per rollout and makes it current; agents reach it through `current_session()`.

Only the classes touch `agent_os`; importing this module does not.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import json
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from pydantic import BaseModel, Field

from agentlightning.semconv import AGL_ANNOTATION
from agentlightning.types import SpanLike

if TYPE_CHECKING:
    from types import ModuleType

__all__ = [
    "AGENTOS_INSTALL_HINT",
    "VIOLATION_PREFIX",
    "PolicyViolation",
    "PolicyViolationError",
    "ToolCallResult",
    "AgentOSSession",
    "current_session",
    "require_agent_os",
    "violations_from_spans",
]

logger = logging.getLogger(__name__)

AGENTOS_INSTALL_HINT = "pip install 'agentlightning[agentos]'"
VIOLATION_PREFIX = "agentos.violation"
"""Attribute prefix of the annotation span recorded per violation (`agentos.violation.tool`, ...)."""

# Keys `SYS_EXEC` itself reads from the request; tool arguments with these names only travel nested.
_EXEC_KEYS = frozenset({"tool", "args", "input_prompt"})
# How often a rollout waiting for the kernel's agent id (held by a concurrent rollout) checks again.
_LOCK_POLL_SECONDS = 0.01

_CURRENT: contextvars.ContextVar[Optional[AgentOSSession]] = contextvars.ContextVar(
    "agentlightning_agentos_session", default=None
)
_AGENT_LOCKS: dict[tuple[int, str], threading.Lock] = {}
_AGENT_LOCKS_GUARD = threading.Lock()


def require_agent_os() -> ModuleType:
    """The `agent_os` module; ImportError naming the `agentos` extra when it is not installed."""
    try:
        import agent_os
    except ImportError as exc:
        raise ImportError(
            f"the Agent-OS integration needs the agent-os-kernel package (module agent_os): {AGENTOS_INSTALL_HINT}"
        ) from exc
    return agent_os


def check_kernel(kernel: Any, owner: str) -> None:
    """TypeError unless `kernel` is an Agent-OS `KernelSpace`."""
    agent_os = require_agent_os()
    if not isinstance(kernel, agent_os.KernelSpace):
        raise TypeError(
            f"{owner} expects an agent_os.KernelSpace as kernel, got {type(kernel).__name__}; build one with "
            "KernelSpace(policy_engine=PolicyEngine()) and register your tools with kernel.register_tool(name, fn)"
        )


class PolicyViolation(BaseModel):
    """One tool call the kernel's policy refused."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    reason: str
    agent_id: str
    rollout_id: Optional[str] = None
    attempt_id: Optional[str] = None

    def to_annotation(self) -> dict[str, Any]:
        """The annotation recorded as a span (`emit_annotation`); arguments travel as JSON text."""
        fields: dict[str, Any] = {
            "tool": self.tool,
            "arguments": json.dumps(self.arguments, default=str, sort_keys=True),
            "reason": self.reason,
            "agent_id": self.agent_id,
        }
        if self.rollout_id is not None:
            fields["rollout_id"] = self.rollout_id
        if self.attempt_id is not None:
            fields["attempt_id"] = self.attempt_id
        return {"agentos": {"violation": fields}}


class PolicyViolationError(RuntimeError):
    """Raised by a governed tool call when the runner was built with `fail_on_violation=True`."""

    def __init__(self, violation: PolicyViolation) -> None:
        super().__init__(f"Agent-OS policy refused tool {violation.tool!r}: {violation.reason}")
        self.violation = violation


@dataclass
class ToolCallResult:
    """What a governed tool call returned.

    `allowed` is False when the kernel's policy refused the call (then `violation` says why and the tool
    did not run); `ok` is True when the tool ran and returned `value`; otherwise `error` says what failed.
    """

    tool: str
    allowed: bool
    ok: bool
    value: Any = None
    error: Optional[str] = None
    violation: Optional[PolicyViolation] = None


def _agent_lock(kernel: Any, agent_id: str) -> threading.Lock:
    with _AGENT_LOCKS_GUARD:
        return _AGENT_LOCKS.setdefault((id(kernel), agent_id), threading.Lock())


class AgentOSSession:
    """One rollout's governed access to an Agent-OS kernel.

    `open()` registers `agent_id` with the kernel (`create_agent_context`); the kernel's policy engine
    keys its allow-list by that id. Rollouts of one kernel sharing an agent id (runner copies in one
    process) take turns, because a violation terminates the kernel's context for that id. `close()`
    unregisters it.
    """

    def __init__(
        self,
        kernel: Any,
        agent_id: str,
        *,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
        fail_on_violation: bool = False,
        emit_violations: bool = True,
    ) -> None:
        check_kernel(kernel, "AgentOSSession")
        if not isinstance(agent_id, str) or not agent_id:  # type: ignore[redundant-expr]
            raise ValueError(f"agent_id must be a non-empty string, got {agent_id!r}")
        self.kernel = kernel
        self.agent_id = agent_id
        self.rollout_id = rollout_id
        self.attempt_id = attempt_id
        self.fail_on_violation = fail_on_violation
        self.emit_violations = emit_violations
        self.violations: list[PolicyViolation] = []
        self.tool_calls = 0
        self._context: Any = None
        self._lock = _agent_lock(kernel, agent_id)
        self._locked = False

    # ---- lifecycle ----

    async def open(self) -> AgentOSSession:
        """Wait for the agent id to be free in this process, then register it with the kernel."""
        while not self._lock.acquire(blocking=False):
            await asyncio.sleep(_LOCK_POLL_SECONDS)
        self._locked = True
        try:
            self._context = self.kernel.create_agent_context(self.agent_id)
        except ValueError as exc:
            self._release()
            raise RuntimeError(
                f"agent id {self.agent_id!r} is already registered with this Agent-OS kernel outside the runner; "
                "give AgentOSRunner an agent_id that nothing else registers"
            ) from exc
        return self

    def close(self) -> None:
        """Unregister the agent id from the kernel and let the next rollout have it."""
        if self._context is not None:
            self.kernel.destroy_agent_context(self.agent_id)
            self._context = None
        self._release()

    def _release(self) -> None:
        if self._locked:
            self._locked = False
            self._lock.release()

    # ---- tool calls ----

    async def call_tool(self, tool: str, /, **arguments: Any) -> ToolCallResult:
        """Run `tool` (registered with `kernel.register_tool`) through the kernel's policy.

        A refused call is recorded (and emitted as a span when `emit_violations`); it raises
        `PolicyViolationError` when the session was opened with `fail_on_violation=True`.
        """
        outcome = await self._execute(tool, arguments)
        return self._settle(outcome)

    def call_tool_sync(self, tool: str, /, **arguments: Any) -> ToolCallResult:
        """`call_tool` for synchronous agents (runs the kernel call on a helper thread when a loop is running)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            outcome = asyncio.run(self._execute(tool, arguments))
        else:
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                outcome = pool.submit(asyncio.run, self._execute(tool, arguments)).result()
        return self._settle(outcome)

    async def _execute(self, tool: str, arguments: Mapping[str, Any]) -> ToolCallResult:
        agent_os = require_agent_os()
        if not isinstance(tool, str) or not tool:  # type: ignore[redundant-expr]
            raise ValueError(f"tool must be a non-empty string, got {tool!r}")
        if self._context is None:
            raise RuntimeError("this Agent-OS session is not open; tools are callable only during the rollout")
        args = dict(arguments)
        # Agent-OS 3.7 checks argument rules (SQL, paths, code) against the syscall's own arguments, while
        # SYS_EXEC hands the tool the nested `args`: pass them both ways so the policy sees what runs.
        request_args = {key: value for key, value in args.items() if key not in _EXEC_KEYS}
        request_args.update(tool=tool, args=args)
        request = agent_os.SyscallRequest(syscall=agent_os.SyscallType.SYS_EXEC, args=request_args)
        self.tool_calls += 1
        try:
            result = await self.kernel.syscall(request, self._context)
        except agent_os.AgentKernelPanic as exc:
            # The kernel answers a violation with SIGPOLICY -> SIGKILL of the agent's context.
            self._respawn()
            return self._refused(tool, args, self._policy_reason(tool, request_args) or str(exc))
        if result.success:
            return ToolCallResult(tool=tool, allowed=True, ok=True, value=result.return_value)
        if result.error_code == -2:  # the kernel's "policy violation" code when it does not panic
            return self._refused(tool, args, result.error_message or "denied by policy")
        return ToolCallResult(tool=tool, allowed=True, ok=False, error=result.error_message or "tool call failed")

    def _refused(self, tool: str, args: dict[str, Any], reason: str) -> ToolCallResult:
        violation = PolicyViolation(
            tool=tool,
            arguments=args,
            reason=reason,
            agent_id=self.agent_id,
            rollout_id=self.rollout_id,
            attempt_id=self.attempt_id,
        )
        return ToolCallResult(tool=tool, allowed=False, ok=False, error=reason, violation=violation)

    def _policy_reason(self, tool: str, request_args: dict[str, Any]) -> Optional[str]:
        """The policy engine's own words for a refusal (the panic only says "SYS_EXEC not allowed").

        Agent-OS 3.7 keeps the engine in a private attribute and its `check_violation` has no side effects;
        asking it again is best effort, and None leaves the panic message as the reason.
        """
        engine = getattr(self.kernel, "_policy_engine", None)
        check = getattr(engine, "check_violation", None)
        if not callable(check):
            return None
        try:
            reason = check(self.agent_id, tool, {**request_args, "_syscall": "SYS_EXEC"})
        except Exception:  # the reason is a courtesy; never let it turn a refusal into a crash
            logger.debug("could not ask the Agent-OS policy engine why %s was refused", tool, exc_info=True)
            return None
        return reason if isinstance(reason, str) and reason else None

    def _respawn(self) -> None:
        """A fresh kernel context for the agent id: the refused call never ran, later calls are checked anew."""
        self.kernel.destroy_agent_context(self.agent_id)
        self._context = self.kernel.create_agent_context(self.agent_id)

    def _settle(self, outcome: ToolCallResult) -> ToolCallResult:
        """Record a violation in the caller's context (its tracer) and apply `fail_on_violation`."""
        violation = outcome.violation
        if violation is None:
            return outcome
        self.violations.append(violation)
        logger.info("Agent-OS refused %s for %s: %s", violation.tool, violation.agent_id, violation.reason)
        if self.emit_violations:
            from agentlightning.emitter import emit_annotation
            from agentlightning.tracer.base import get_active_tracer

            if get_active_tracer() is not None:
                emit_annotation(violation.to_annotation())
            else:  # a session used outside a traced rollout: the list above still has it
                logger.warning(
                    "no active tracer: the Agent-OS violation of %s is not recorded as a span", violation.tool
                )
        if self.fail_on_violation:
            raise PolicyViolationError(violation)
        return outcome


def current_session() -> AgentOSSession:
    """The Agent-OS session of the rollout running in this context (set by `AgentOSRunner`)."""
    session = _CURRENT.get()
    if session is None:
        raise RuntimeError(
            "no Agent-OS session is active: governed tool calls work inside a rollout run by "
            "agentlightning.contrib.runner.agentos.AgentOSRunner"
        )
    return session


def set_current_session(session: Optional[AgentOSSession]) -> contextvars.Token[Optional[AgentOSSession]]:
    """Make `session` current (for runners); pass the token to `reset_current_session` afterwards."""
    return _CURRENT.set(session)


def reset_current_session(token: contextvars.Token[Optional[AgentOSSession]]) -> None:
    _CURRENT.reset(token)


def _violation_from_attributes(attributes: Mapping[str, Any]) -> Optional[PolicyViolation]:
    prefix = f"{VIOLATION_PREFIX}."
    fields = {key[len(prefix) :]: value for key, value in attributes.items() if key.startswith(prefix)}
    if "tool" not in fields:
        return None
    raw_arguments = fields.get("arguments")
    try:
        arguments = json.loads(raw_arguments) if isinstance(raw_arguments, str) else {}
    except json.JSONDecodeError:
        arguments = {"raw": raw_arguments}
    return PolicyViolation(
        tool=str(fields["tool"]),
        arguments=arguments if isinstance(arguments, dict) else {"value": arguments},  # type: ignore[arg-type]
        reason=str(fields.get("reason", "")),
        agent_id=str(fields.get("agent_id", "")),
        rollout_id=str(fields["rollout_id"]) if "rollout_id" in fields else None,
        attempt_id=str(fields["attempt_id"]) if "attempt_id" in fields else None,
    )


def violations_from_spans(spans: Iterable[SpanLike]) -> list[PolicyViolation]:
    """The violations recorded in a rollout's spans (the annotation spans `AgentOSRunner` emits)."""
    found: list[PolicyViolation] = []
    for span in spans:
        if span.name != AGL_ANNOTATION:
            continue
        violation = _violation_from_attributes(span.attributes or {})
        if violation is not None:
            found.append(violation)
    return found
