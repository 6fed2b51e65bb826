"""`Hook`: callbacks a runner invokes around each rollout (v0.3's `agentlightning.types.Hook`).

A hook sees the agent, the runner and the tracer through the protocols of `types/protocols.py`, so it
lives with the data types and every layer above may define one.
"""

from __future__ import annotations

from typing import Union

from opentelemetry.sdk.trace import ReadableSpan

from .core import ParallelWorkerBase, Rollout
from .protocols import AgentLike, RunnerLike, TracerLike
from .tracer import Span

__all__ = ["Hook"]


class Hook(ParallelWorkerBase):
    """Callbacks a runner invokes around each rollout; all are no-ops by default."""

    async def on_trace_start(
        self, *, agent: AgentLike, runner: RunnerLike, tracer: TracerLike, rollout: Rollout
    ) -> None:
        """Called right after the tracer context opened, before the agent runs."""

    async def on_trace_end(self, *, agent: AgentLike, runner: RunnerLike, tracer: TracerLike, rollout: Rollout) -> None:
        """Called after the agent returned, before the tracer context closes."""

    async def on_rollout_start(self, *, agent: AgentLike, runner: RunnerLike, rollout: Rollout) -> None:
        """Called before the tracer context opens."""

    async def on_rollout_end(
        self,
        *,
        agent: AgentLike,
        runner: RunnerLike,
        rollout: Rollout,
        spans: Union[list[ReadableSpan], list[Span]],
    ) -> None:
        """Called after the rollout's result was posted, before the attempt is finalised."""
