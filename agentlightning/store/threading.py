"""`LightningStoreThreaded`: make any store safe to share between threads by serialising its calls."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Optional, Union

from opentelemetry.sdk.trace import ReadableSpan

from agentlightning.types import (
    Attempt,
    AttemptedRollout,
    EnqueueRolloutRequest,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    Span,
    TaskInput,
    Worker,
    WorkerStatus,
)

from . import _arguments as arguments
from .base import (
    UNSET,
    FilterLogic,
    LightningStore,
    LightningStoreCapabilities,
    LightningStoreStatistics,
    SortOrder,
)
from .collection.waiters import CompletionWaiter

__all__ = ["LightningStoreThreaded"]


class LightningStoreThreaded(LightningStore):
    """Delegates every call to `store` while holding one `threading.Lock`.

    Threads may each run their own event loop. `wait_for_rollouts` never holds the lock while it
    waits: it takes snapshots under the lock and sleeps until any call through this facade finishes.
    """

    # Re-check at least this often even without a wake-up (changes made behind the facade's back).
    wait_poll_seconds: float = 10.0

    def __init__(self, store: LightningStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._waiters_lock = threading.Lock()
        self._waiters: set[CompletionWaiter] = set()

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
                with self._waiters_lock:
                    waiters = list(self._waiters)
                for waiter in waiters:
                    waiter.wake()

    def otlp_traces_endpoint(self) -> str:
        return self.store.otlp_traces_endpoint()

    async def statistics(self) -> LightningStoreStatistics:
        async with self._locked():
            return await self.store.statistics()

    async def close(self) -> None:
        async with self._locked():
            await self.store.close()

    # ---- rollouts and the queue ----

    async def start_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
        worker_id: Optional[str] = None,
    ) -> AttemptedRollout:
        async with self._locked():
            return await self.store.start_rollout(input, mode, resources_id, config, metadata, worker_id)

    async def enqueue_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> Rollout:
        async with self._locked():
            return await self.store.enqueue_rollout(input, mode, resources_id, config, metadata)

    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        async with self._locked():
            return await self.store.enqueue_many_rollouts(rollouts)

    async def dequeue_rollout(self, worker_id: Optional[str] = None) -> Optional[AttemptedRollout]:
        async with self._locked():
            return await self.store.dequeue_rollout(worker_id=worker_id)

    async def dequeue_many_rollouts(self, *, limit: int = 1, worker_id: Optional[str] = None) -> list[AttemptedRollout]:
        async with self._locked():
            return await self.store.dequeue_many_rollouts(limit=limit, worker_id=worker_id)

    async def start_attempt(self, rollout_id: str, worker_id: Optional[str] = None) -> AttemptedRollout:
        async with self._locked():
            return await self.store.start_attempt(rollout_id, worker_id=worker_id)

    async def query_rollouts(
        self,
        *,
        status_in: Optional[Sequence[RolloutStatus]] = None,
        rollout_id_in: Optional[Sequence[str]] = None,
        rollout_id_contains: Optional[str] = None,
        filter_logic: FilterLogic = "and",
        sort_by: Optional[str] = None,
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
        status: Optional[Sequence[RolloutStatus]] = None,
        rollout_ids: Optional[Sequence[str]] = None,
    ) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
        async with self._locked():
            return await self.store.query_rollouts(
                status_in=status_in,
                rollout_id_in=rollout_id_in,
                rollout_id_contains=rollout_id_contains,
                filter_logic=filter_logic,
                sort_by=sort_by,
                sort_order=sort_order,
                limit=limit,
                offset=offset,
                status=status,
                rollout_ids=rollout_ids,
            )

    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        async with self._locked():
            return await self.store.get_rollout_by_id(rollout_id)

    async def update_rollout(
        self,
        rollout_id: str,
        input: Any = UNSET,
        mode: Any = UNSET,
        resources_id: Any = UNSET,
        status: Any = UNSET,
        config: Any = UNSET,
        metadata: Any = UNSET,
    ) -> Rollout:
        async with self._locked():
            return await self.store.update_rollout(
                rollout_id,
                input=input,
                mode=mode,
                resources_id=resources_id,
                status=status,
                config=config,
                metadata=metadata,
            )

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

    # ---- attempts ----

    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: Optional[str] = "sequence_id",
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Attempt]:
        async with self._locked():
            return await self.store.query_attempts(
                rollout_id, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset
            )

    async def get_latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        async with self._locked():
            return await self.store.get_latest_attempt(rollout_id)

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: Any = UNSET,
        worker_id: Any = UNSET,
        last_heartbeat_time: Any = UNSET,
        metadata: Any = UNSET,
    ) -> Attempt:
        async with self._locked():
            return await self.store.update_attempt(
                rollout_id,
                attempt_id,
                status=status,
                worker_id=worker_id,
                last_heartbeat_time=last_heartbeat_time,
                metadata=metadata,
            )

    # ---- spans ----

    async def add_span(self, span: Span) -> Optional[Span]:
        async with self._locked():
            return await self.store.add_span(span)

    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        async with self._locked():
            return await self.store.add_many_spans(spans)

    async def add_otel_span(
        self,
        rollout_id: str,
        attempt_id: str,
        readable_span: ReadableSpan,
        sequence_id: Optional[int] = None,
    ) -> Optional[Span]:
        async with self._locked():
            return await self.store.add_otel_span(rollout_id, attempt_id, readable_span, sequence_id)

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        async with self._locked():
            return await self.store.get_next_span_sequence_id(rollout_id, attempt_id)

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        async with self._locked():
            return await self.store.get_many_span_sequence_ids(rollout_attempt_ids)

    async def query_spans(
        self,
        rollout_id: str,
        attempt_id: Optional[str] = None,
        *,
        trace_id: Optional[str] = None,
        trace_id_contains: Optional[str] = None,
        span_id: Optional[str] = None,
        span_id_contains: Optional[str] = None,
        parent_id: Optional[str] = None,
        parent_id_contains: Optional[str] = None,
        name: Optional[str] = None,
        name_contains: Optional[str] = None,
        filter_logic: FilterLogic = "and",
        limit: int = -1,
        offset: int = 0,
        sort_by: Optional[str] = "sequence_id",
        sort_order: SortOrder = "asc",
    ) -> PaginatedResult[Span]:
        async with self._locked():
            return await self.store.query_spans(
                rollout_id,
                attempt_id,
                trace_id=trace_id,
                trace_id_contains=trace_id_contains,
                span_id=span_id,
                span_id_contains=span_id_contains,
                parent_id=parent_id,
                parent_id_contains=parent_id_contains,
                name=name,
                name_contains=name_contains,
                filter_logic=filter_logic,
                limit=limit,
                offset=offset,
                sort_by=sort_by,
                sort_order=sort_order,
            )

    # ---- resources ----

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        async with self._locked():
            return await self.store.add_resources(resources)

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        async with self._locked():
            return await self.store.update_resources(resources_id, resources)

    async def get_resources_by_id(self, resources_id: str) -> Optional[ResourcesUpdate]:
        async with self._locked():
            return await self.store.get_resources_by_id(resources_id)

    async def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        async with self._locked():
            return await self.store.get_latest_resources()

    async def query_resources(
        self,
        *,
        resources_id: Optional[str] = None,
        resources_id_contains: Optional[str] = None,
        sort_by: Optional[str] = None,
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[ResourcesUpdate]:
        async with self._locked():
            return await self.store.query_resources(
                resources_id=resources_id,
                resources_id_contains=resources_id_contains,
                sort_by=sort_by,
                sort_order=sort_order,
                limit=limit,
                offset=offset,
            )

    # ---- workers ----

    async def query_workers(
        self,
        *,
        status_in: Optional[Sequence[WorkerStatus]] = None,
        worker_id_contains: Optional[str] = None,
        filter_logic: FilterLogic = "and",
        sort_by: Optional[str] = None,
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Worker]:
        async with self._locked():
            return await self.store.query_workers(
                status_in=status_in,
                worker_id_contains=worker_id_contains,
                filter_logic=filter_logic,
                sort_by=sort_by,
                sort_order=sort_order,
                limit=limit,
                offset=offset,
            )

    async def get_worker_by_id(self, worker_id: str) -> Optional[Worker]:
        async with self._locked():
            return await self.store.get_worker_by_id(worker_id)

    async def update_worker(self, worker_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        async with self._locked():
            return await self.store.update_worker(worker_id, heartbeat_stats=heartbeat_stats)
