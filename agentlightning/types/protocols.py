"""The trainer and the runner as seen from the layers below them, so those layers never import upward.

An algorithm keeps a reference to the `Trainer` that runs it, and an agent to its `Trainer` and its
`Runner`; neither may import those classes (they sit higher up). These protocols name what the lower
layer may rely on; `agentlightning.Trainer` and every `agentlightning.Runner` satisfy them.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

__all__ = ["TrainerLike", "RunnerLike"]


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
