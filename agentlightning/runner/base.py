"""`Runner`: the worker-side loop contract that executes a `LitAgent` against a store, calling its `Hook`s."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, Optional, Protocol, TypeVar

from agentlightning.types import Hook, NamedResources, ParallelWorkerBase, Rollout, RolloutMode

if TYPE_CHECKING:
    from agentlightning.litagent import LitAgent
    from agentlightning.store.base import LightningStore

__all__ = ["Runner", "StopEvent"]

logger = logging.getLogger(__name__)

T_task = TypeVar("T_task")


class StopEvent(Protocol):
    """What a runner needs from a stop signal: `threading.Event`, `ExecutionEvent` and the like fit."""

    def is_set(self) -> bool: ...


class Runner(ParallelWorkerBase, ABC, Generic[T_task]):
    """Executes an agent's rollouts, one at a time, and reports them to a `LightningStore`.

    Lifecycle: `init(agent)` once, `init_worker(worker_id, store)` per worker, then `iter()` (pull rollouts
    from the store until stopped) or `step(input)` (run one ad-hoc rollout), then `teardown_worker` and
    `teardown`. `run_context` does the lifecycle around a `with` block, for scripts and debugging.
    """

    run_name: Optional[str] = None
    """When set, `iter()` claims only the rollouts of this run (`metadata["agl_run"]`): `Trainer.fit` sets it,
    so that several runs can share one store without taking each other's rollouts."""

    @abstractmethod
    def init(self, agent: LitAgent[T_task], **kwargs: Any) -> None:
        """Prepare to run `agent` (once per process)."""

    @abstractmethod
    def init_worker(self, worker_id: int, store: LightningStore, **kwargs: Any) -> None:  # type: ignore[override]
        """Prepare worker `worker_id` to talk to `store`."""

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Release what `init` acquired."""

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        """Release what `init_worker` acquired."""

    def run(self, *args: Any, **kwargs: Any) -> None:
        """Deprecated entry point of v0.1 runners; use `iter()` or `step()`."""
        raise RuntimeError(
            f"{type(self).__name__}.run() is not supported; use `await runner.iter()` or `runner.step()`"
        )

    @abstractmethod
    async def iter(self, *, event: Optional[StopEvent] = None) -> None:
        """Dequeue and run rollouts until `event` is set (or the runner's own limit is reached)."""

    @abstractmethod
    async def step(
        self,
        input: T_task,
        *,
        resources: Optional[NamedResources] = None,
        mode: Optional[RolloutMode] = None,
        event: Optional[StopEvent] = None,
    ) -> Rollout:
        """Run one rollout of `input` right away (bypassing the queue) and return it in its final state."""

    @contextmanager
    def run_context(
        self,
        *,
        agent: LitAgent[T_task],
        store: LightningStore,
        hooks: Optional[Sequence[Hook]] = None,
        worker_id: Optional[int] = None,
    ) -> Iterator[Runner[T_task]]:
        """`init`/`init_worker` before the block and `teardown_worker`/`teardown` after it.

        `worker_id` is set inside the block and reset to None when it exits.
        """
        worker = 0 if worker_id is None else worker_id
        initialized = worker_initialized = False
        try:
            self.init(agent=agent, hooks=hooks)
            initialized = True
            self.init_worker(worker, store)
            worker_initialized = True
            yield self
        finally:
            if worker_initialized:
                try:
                    self.teardown_worker(worker)
                except Exception:
                    logger.exception("%s: teardown_worker(%s) failed", type(self).__name__, worker)
            if initialized:
                try:
                    self.teardown()
                except Exception:
                    logger.exception("%s: teardown() failed", type(self).__name__)
            self.worker_id = None
