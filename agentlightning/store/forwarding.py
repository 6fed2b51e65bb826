"""`ForwardingLightningStore`: the contract's method list, written once, for stores that pass calls on.

A wrapper (the threaded facade, the HTTP client, the server's delegate) implements `_forward` and
gets every contract method with its full signature; it overrides only the methods it treats apart.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, Optional, Union

from opentelemetry.sdk.trace import ReadableSpan

from agentlightning.types import (
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    EnqueueRolloutRequest,
    FinishedAttempt,
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

from .base import UNSET, FilterLogic, LightningStore, LightningStoreStatistics, SortOrder

__all__ = ["ForwardingLightningStore"]


def _arguments(frame_locals: dict[str, Any]) -> dict[str, Any]:
    """A method's arguments by name, from its `locals()` taken before anything else is bound."""
    return {name: value for name, value in frame_locals.items() if name != "self"}


class ForwardingLightningStore(LightningStore):
    """Implements every contract method as `await self._forward(method_name, arguments_by_name)`.

    Methods with a default implementation in `LightningStore` (the `*_many_*` batch calls,
    `add_otel_span`, `statistics`) are forwarded too, so the target's own versions are used.
    """

    @abstractmethod
    async def _forward(self, method: str, arguments: dict[str, Any]) -> Any:
        """Run contract method `method` with `arguments` (every parameter, by name) on the target."""

    async def statistics(self) -> LightningStoreStatistics:
        return await self._forward("statistics", {})

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
        return await self._forward("start_rollout", _arguments(locals()))

    async def enqueue_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> Rollout:
        return await self._forward("enqueue_rollout", _arguments(locals()))

    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        return await self._forward("enqueue_many_rollouts", _arguments(locals()))

    async def dequeue_rollout(
        self, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> Optional[AttemptedRollout]:
        return await self._forward("dequeue_rollout", _arguments(locals()))

    async def dequeue_many_rollouts(
        self, *, limit: int = 1, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> list[AttemptedRollout]:
        return await self._forward("dequeue_many_rollouts", _arguments(locals()))

    async def wait_for_dequeue(
        self, *, timeout: float, limit: int = 1, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> list[AttemptedRollout]:
        return await self._forward("wait_for_dequeue", _arguments(locals()))

    async def start_attempt(self, rollout_id: str, worker_id: Optional[str] = None) -> AttemptedRollout:
        return await self._forward("start_attempt", _arguments(locals()))

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
        return await self._forward("query_rollouts", _arguments(locals()))

    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        return await self._forward("get_rollout_by_id", _arguments(locals()))

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
        return await self._forward("update_rollout", _arguments(locals()))

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        return await self._forward("wait_for_rollouts", _arguments(locals()))

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
        return await self._forward("query_attempts", _arguments(locals()))

    async def get_latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        return await self._forward("get_latest_attempt", _arguments(locals()))

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: Any = UNSET,
        worker_id: Any = UNSET,
        last_heartbeat_time: Any = UNSET,
        metadata: Any = UNSET,
    ) -> Attempt:
        return await self._forward("update_attempt", _arguments(locals()))

    async def finish_attempt(
        self, rollout_id: str, attempt_id: str, status: AttemptStatus, spans: Sequence[Span] = ()
    ) -> FinishedAttempt:
        return await self._forward("finish_attempt", _arguments(locals()))

    # ---- spans ----

    async def add_span(self, span: Span) -> Optional[Span]:
        return await self._forward("add_span", _arguments(locals()))

    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        return await self._forward("add_many_spans", _arguments(locals()))

    async def add_otel_span(
        self,
        rollout_id: str,
        attempt_id: str,
        readable_span: ReadableSpan,
        sequence_id: Optional[int] = None,
    ) -> Optional[Span]:
        return await self._forward("add_otel_span", _arguments(locals()))

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        return await self._forward("get_next_span_sequence_id", _arguments(locals()))

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        return await self._forward("get_many_span_sequence_ids", _arguments(locals()))

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
        return await self._forward("query_spans", _arguments(locals()))

    # ---- resources ----

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        return await self._forward("add_resources", _arguments(locals()))

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        return await self._forward("update_resources", _arguments(locals()))

    async def get_resources_by_id(self, resources_id: str) -> Optional[ResourcesUpdate]:
        return await self._forward("get_resources_by_id", _arguments(locals()))

    async def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        return await self._forward("get_latest_resources", {})

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
        return await self._forward("query_resources", _arguments(locals()))

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
        return await self._forward("query_workers", _arguments(locals()))

    async def get_worker_by_id(self, worker_id: str) -> Optional[Worker]:
        return await self._forward("get_worker_by_id", _arguments(locals()))

    async def update_worker(self, worker_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        return await self._forward("update_worker", _arguments(locals()))
