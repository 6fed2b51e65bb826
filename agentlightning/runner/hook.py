"""`Hook`: callbacks a runner invokes around each rollout.

Hooks see the agent, the runner and the tracer, so they belong to the runner layer rather than to the
data types. v0.3 imported `Hook` from `agentlightning.types`; that path still resolves (lazily) to this class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

from opentelemetry.sdk.trace import ReadableSpan

from agentlightning.types import ParallelWorkerBase, Rollout, Span

if TYPE_CHECKING:
    from agentlightning.litagent import LitAgent
    from agentlightning.tracer import Tracer

    from .base import Runner

__all__ = ["Hook"]


class Hook(ParallelWorkerBase):
    """Callbacks a runner invokes around each rollout; all are no-ops by default."""

    async def on_trace_start(
        self, *, agent: LitAgent[Any], runner: Runner[Any], tracer: Tracer, rollout: Rollout
    ) -> None:
        """Called right after the tracer context opened, before the agent runs."""

    async def on_trace_end(
        self, *, agent: LitAgent[Any], runner: Runner[Any], tracer: Tracer, rollout: Rollout
    ) -> None:
        """Called after the agent returned, before the tracer context closes."""

    async def on_rollout_start(self, *, agent: LitAgent[Any], runner: Runner[Any], rollout: Rollout) -> None:
        """Called before the tracer context opens."""

    async def on_rollout_end(
        self,
        *,
        agent: LitAgent[Any],
        runner: Runner[Any],
        rollout: Rollout,
        spans: Union[list[ReadableSpan], list[Span]],
    ) -> None:
        """Called after the rollout's result was posted, before the attempt is finalised."""
