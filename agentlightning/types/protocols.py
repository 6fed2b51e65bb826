"""The trainer, the runner, the agent and the tracer as seen from the layers below them.

An algorithm keeps a reference to the `Trainer` that runs it, an agent to its `Trainer` and its
`Runner`, and a `Hook` receives the agent, the runner and the tracer; none may import those classes
(they sit higher up). These protocols name what the lower layer may rely on; `agentlightning.Trainer`,
every `Runner`, `LitAgent` and `Tracer` satisfy them.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

__all__ = ["TrainerLike", "RunnerLike", "AgentLike", "TracerLike"]


@runtime_checkable
class TrainerLike(Protocol):
    """A `Trainer`, as an algorithm or an agent sees it."""

    @property
    def tracer(self) -> Any:
        """The trainer's `Tracer`."""
        ...

    @property
    def n_runners(self) -> int: ...

    @property
    def max_rollouts(self) -> Optional[int]: ...


@runtime_checkable
class RunnerLike(Protocol):
    """A `Runner`, as the agent it runs sees it (the lifecycle the runner drives)."""

    def init(self, agent: Any, **kwargs: Any) -> None: ...

    def init_worker(self, worker_id: int, store: Any, **kwargs: Any) -> None: ...

    def teardown(self, *args: Any, **kwargs: Any) -> None: ...

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None: ...


@runtime_checkable
class AgentLike(Protocol):
    """A `LitAgent`, as a hook sees it."""

    def is_async(self) -> bool: ...


@runtime_checkable
class TracerLike(Protocol):
    """A `Tracer`, as a hook sees it: the spans of the trace it recorded last."""

    def get_last_trace(self) -> list[Any]: ...
