"""ExecutionStrategy: decides where the algorithm bundle and the runner bundles run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

from agentlightning.store.base import LightningStore

from .events import ExecutionEvent

__all__ = ["ExecutionStrategy", "AlgorithmBundle", "RunnerBundle"]

AlgorithmBundle = Callable[[LightningStore, ExecutionEvent], Awaitable[None]]
"""`async (store, stop_event) -> None`: runs the algorithm against the store until done or stopped."""

RunnerBundle = Callable[[LightningStore, int, ExecutionEvent], Awaitable[None]]
"""`async (store, worker_id, stop_event) -> None`: runs one runner worker until stopped."""


class ExecutionStrategy(ABC):
    """Places the bundles (threads, processes, machines), wraps the store for them, and shuts them down.

    `execute` blocks until training ends; it stops every bundle it started, also on failure or Ctrl+C.
    """

    n_runners: int = 1

    @abstractmethod
    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        """Run one algorithm bundle and `n_runners` runner bundles against `store` until training ends."""
