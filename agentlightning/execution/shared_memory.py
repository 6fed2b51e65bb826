"""SharedMemoryExecutionStrategy: algorithm and runners as threads of one process, one event loop each."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Literal, Optional

from agentlightning.env_var import LightningEnvVar, resolve_bool_env_var
from agentlightning.store.base import LightningStore

from ._supervise import run_until_stopped
from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle
from .events import ThreadingEvent

__all__ = ["SharedMemoryExecutionStrategy"]

logger = logging.getLogger(__name__)

MainThreadRole = Literal["runner", "algorithm"]


class SharedMemoryExecutionStrategy(ExecutionStrategy):
    """Run everything in this process: easy to debug, no serialization, but no process isolation.

    The store is wrapped in `LightningStoreThreaded` (unless `managed_store` / `AGL_MANAGED_STORE` says
    not to). Each bundle runs in its own thread with its own event loop; one of them on the main thread.
    Ctrl+C or any bundle failure sets the shared stop event; a stopped bundle gets `graceful_delay`
    seconds before it is cancelled. When the main-thread bundle ends: the algorithm on main stops the
    runners; a runner on main lets the algorithm run to completion.

    Ctrl+C is logged and `execute` returns once the bundles stopped (as in v0.3): `Trainer.fit` in a
    notebook or a test returns instead of raising `KeyboardInterrupt` into the caller. A second Ctrl+C
    while the bundles stop does raise. (`ClientServerExecutionStrategy` re-raises, so scripts exit 130.)

    Args:
        n_runners: runner threads; must be 1 when the runner owns the main thread.
        main_thread: which bundle runs on the main thread ("runner", the default, or "algorithm").
        join_timeout: how long to wait for the other threads after the stop event.
        graceful_delay: seconds a bundle has to finish after the stop event before it is cancelled.
        poll_interval: how often bundles check the stop event.
        managed_store: wrap the store in `LightningStoreThreaded` (default from `AGL_MANAGED_STORE`, else true).
    """

    alias = "shm"

    def __init__(
        self,
        n_runners: int = 1,
        main_thread: MainThreadRole = "runner",
        join_timeout: float = 15.0,
        graceful_delay: float = 5.0,
        poll_interval: float = 0.05,
        managed_store: Optional[bool] = None,
    ) -> None:
        if n_runners < 1:
            raise ValueError(f"n_runners must be >= 1, got {n_runners}")
        if main_thread not in ("runner", "algorithm"):
            raise ValueError(f"main_thread must be 'runner' or 'algorithm', got {main_thread!r}")
        if main_thread == "runner" and n_runners != 1:
            raise ValueError(
                f"main_thread='runner' supports exactly one runner (got n_runners={n_runners}); "
                "use main_thread='algorithm' to run several runner threads"
            )
        self.n_runners = n_runners
        self.main_thread: MainThreadRole = main_thread
        self.join_timeout = join_timeout
        self.graceful_delay = graceful_delay
        self.poll_interval = poll_interval
        self.managed_store: bool = resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE, managed_store, fallback=True)

    def __repr__(self) -> str:
        return (
            f"SharedMemoryExecutionStrategy(n_runners={self.n_runners}, main_thread={self.main_thread!r}, "
            f"managed_store={self.managed_store})"
        )

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        if self.managed_store:
            from agentlightning.store.threading import LightningStoreThreaded

            store = LightningStoreThreaded(store)
        stop_event = ThreadingEvent()
        errors: list[BaseException] = []

        def supervise(make: Callable[[], Awaitable[None]], name: str, stop_when_done: bool) -> None:
            """Run one bundle on the current thread; record its failure and stop the others.

            The algorithm finishing ends training, so it also stops the runners.
            """
            try:
                asyncio.run(
                    run_until_stopped(
                        make(),
                        stop_event,
                        graceful_delay=self.graceful_delay,
                        poll_interval=self.poll_interval,
                        name=name,
                    )
                )
            except BaseException as exc:
                if not isinstance(exc, KeyboardInterrupt):
                    logger.exception("%s failed; stopping all bundles", name)
                errors.append(exc)
                stop_event.set()
            else:
                if stop_when_done:
                    stop_event.set()

        def make_runner(worker_id: int) -> Callable[[], Awaitable[None]]:
            return lambda: runner(store, worker_id, stop_event)

        def make_algorithm() -> Awaitable[None]:
            return algorithm(store, stop_event)

        if self.main_thread == "algorithm":
            background = [
                threading.Thread(
                    target=supervise,
                    args=(make_runner(i), f"Runner-{i}", False),
                    name=f"AgentLightning-Runner-{i}",
                    daemon=True,
                )
                for i in range(self.n_runners)
            ]
            main_make, main_name, main_is_algorithm = make_algorithm, "Algorithm", True
        else:
            background = [
                threading.Thread(
                    target=supervise,
                    args=(make_algorithm, "Algorithm", True),
                    name="AgentLightning-Algorithm",
                    daemon=True,
                )
            ]
            main_make, main_name, main_is_algorithm = make_runner(0), "Runner-0", False

        for thread in background:
            thread.start()
        interrupted = False
        try:
            supervise(main_make, main_name, main_is_algorithm)
            if any(isinstance(e, KeyboardInterrupt) for e in errors):
                interrupted = True
            elif not main_is_algorithm:
                # The runner on the main thread finished; the algorithm runs to completion.
                self._wait_for(background, deadline=None)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if interrupted:
                logger.warning("Interrupted; stopping all bundles (up to %.1f s)", self.join_timeout)
            stop_event.set()
            self._wait_for(background, deadline=time.monotonic() + self.join_timeout)

        if interrupted:
            logger.warning("Interrupted by Ctrl+C: all bundles stopped; returning to the caller")
            return
        failures = [e for e in errors if not isinstance(e, KeyboardInterrupt)]
        if failures:
            raise failures[0]

    def _wait_for(self, threads: list[threading.Thread], deadline: Optional[float]) -> None:
        """Join threads until the deadline (None: forever), staying responsive to Ctrl+C."""
        for thread in threads:
            while thread.is_alive():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    logger.warning("Thread %s is still running after the join timeout; leaving it behind", thread.name)
                    break
                thread.join(timeout=0.1 if remaining is None else min(0.1, remaining))
