"""`LightningStoreThreaded`: make any store safe to share between threads by serialising its calls."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Optional

from agentlightning.types import AttemptedRollout, Rollout

from . import _arguments as arguments
from .base import LightningStore, LightningStoreCapabilities
from .forwarding import ForwardingLightningStore
from .waiters import CompletionWaiter

__all__ = ["LightningStoreThreaded"]

# The calls through which a rollout can join the queue: they wake `wait_for_dequeue` callers.
_QUEUEING_CALLS = frozenset({"enqueue_rollout", "enqueue_many_rollouts", "update_rollout", "update_attempt"})


class LightningStoreThreaded(ForwardingLightningStore):
    """Delegates every call to `store` while holding one `threading.Lock`.

    Threads may each run their own event loop. `wait_for_rollouts` and `wait_for_dequeue` never hold
    the lock while they wait: they take snapshots under the lock and sleep until a call through this
    facade may have changed the answer (any call for the former, one that can queue a rollout for the latter).
    """

    # Re-check at least this often even without a wake-up (changes made behind the facade's back).
    wait_poll_seconds: float = 10.0
    # How often `wait_for_dequeue` re-asks without a wake-up (e.g. a rollout the watchdog requeued).
    queue_poll_seconds: float = 1.0

    def __init__(self, store: LightningStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._waiters_lock = threading.Lock()
        self._waiters: set[CompletionWaiter] = set()
        self._queue_waiters: set[CompletionWaiter] = set()

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        inner = self.store.capabilities
        return LightningStoreCapabilities(
            thread_safe=True,
            async_safe=True,
            zero_copy=bool(inner.get("zero_copy", False)),
            otlp_traces=bool(inner.get("otlp_traces", False)),
        )

    async def _acquire_slowly(self) -> None:
        # Blocking here would stall this thread's event loop (and deadlock a holder on the same loop),
        # so wait for the lock on an executor thread instead.
        future = asyncio.get_running_loop().run_in_executor(None, self._lock.acquire)
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            future.add_done_callback(lambda f: self._lock.release() if not f.cancelled() and f.result() else None)
            raise

    @asynccontextmanager
    async def _locked(self, *, wake_waiters: bool = True) -> AsyncIterator[None]:
        if not self._lock.acquire(blocking=False):
            await self._acquire_slowly()
        try:
            yield
        finally:
            self._lock.release()
            # Any call may have finished a rollout (directly or via the watchdog); waiters re-check.
            if wake_waiters and self._waiters:
                self._wake(self._waiters)

    def otlp_traces_endpoint(self) -> str:
        return self.store.otlp_traces_endpoint()

    async def close(self) -> None:
        async with self._locked():
            await self.store.close()

    async def _forward(self, method: str, arguments: dict[str, Any]) -> Any:
        try:
            async with self._locked():
                return await getattr(self.store, method)(**arguments)
        finally:
            if method in _QUEUEING_CALLS and self._queue_waiters:
                self._wake(self._queue_waiters)

    def _wake(self, waiters: set[CompletionWaiter]) -> None:
        with self._waiters_lock:
            woken = list(waiters)
        for waiter in woken:
            waiter.wake()

    async def _snapshot(self, rollout_ids: list[str]) -> tuple[list[Rollout], bool]:
        # Waiters must not wake each other with their own snapshots, or they would spin.
        async with self._locked(wake_waiters=False):
            finished = await self.store.wait_for_rollouts(rollout_ids=rollout_ids, timeout=0)
            known = await self.store.query_rollouts(rollout_id_in=rollout_ids)
        done = {r.rollout_id for r in finished}
        return finished, any(r.rollout_id not in done for r in known)

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        timeout = arguments.check_wait_timeout(timeout)
        ids = list(rollout_ids)
        if timeout == 0:
            return (await self._snapshot(ids))[0]
        deadline = None if timeout is None else time.monotonic() + timeout
        waiter = CompletionWaiter(ids)
        with self._waiters_lock:
            self._waiters.add(waiter)
        try:
            while True:
                finished, pending = await self._snapshot(ids)
                remaining = None if deadline is None else deadline - time.monotonic()
                if not pending or (remaining is not None and remaining <= 0):
                    return finished
                await waiter.wait(
                    self.wait_poll_seconds if remaining is None else min(remaining, self.wait_poll_seconds)
                )
        finally:
            with self._waiters_lock:
                self._waiters.discard(waiter)

    async def wait_for_dequeue(
        self, *, timeout: float, limit: int = 1, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> list[AttemptedRollout]:
        wait = arguments.check_dequeue_wait(timeout)
        arguments.check_dequeue_limit(limit)
        if limit <= 0:
            return []
        deadline = time.monotonic() + wait
        waiter = CompletionWaiter(())
        with self._waiters_lock:
            self._queue_waiters.add(waiter)
        try:
            while True:
                async with self._locked():
                    claimed = await self.store.dequeue_many_rollouts(limit=limit, worker_id=worker_id, run=run)
                remaining = deadline - time.monotonic()
                if claimed or remaining <= 0:
                    return claimed
                await waiter.wait(min(remaining, self.queue_poll_seconds))
        finally:
            with self._waiters_lock:
                self._queue_waiters.discard(waiter)
