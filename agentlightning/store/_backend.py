"""`BackendLightningStore`: what every store that holds the data itself (collections, SQL) does the same way.

It owns the per-store machinery (clock, metrics, watchdog, completion waiters) and the public calls that
only check their arguments and hand them to the backend; a backend supplies the steps below (`_enqueue_many`,
`_dequeue`, `_finished`, `_next_sequence_ids`, `_put_resources`, `_scan_unhealthy`, the `_*_page` queries) and
the other calls.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, Optional, Union

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
from .base import UNSET, FilterLogic, LightningStore, SortOrder
from .tracking import register_store_metrics, tracked
from .utils import Clock
from .waiters import CompletionWaiters, QueueWaiters, dequeue_when_available, wait_until_finished
from .watchdog import Watchdog, healthcheck_before

__all__ = ["BackendLightningStore"]


class BackendLightningStore(LightningStore):
    """Base of the data-holding stores; `wait_poll_seconds` is how often waits re-read for other processes.

    A backend calls `_queue_waiters.notify()` after it (re)queues a rollout, which wakes `wait_for_dequeue`
    callers of this process at once; `queue_poll_seconds` is how often they re-ask for other processes' work.
    """

    wait_poll_seconds: float = 10.0
    queue_poll_seconds: float = 10.0

    def _start_machinery(self, *, clock: Optional[Clock], tracker: Any, scan_debounce_seconds: float) -> None:
        """Set up the clock, metrics, watchdog and waiters; every backend calls this from `__init__`."""
        self._clock: Clock = clock or time.time
        self._tracker = tracker
        if tracker is not None:
            register_store_metrics(tracker)
        self._watchdog = Watchdog(self._scan_unhealthy, clock=self._clock, debounce_seconds=scan_debounce_seconds)
        self._waiters = CompletionWaiters()
        self._queue_waiters = QueueWaiters()
        self._started_at = self._clock()

    # ---- the backend's steps ----

    @abstractmethod
    async def _scan_unhealthy(self, now: float) -> None:
        """Mark latest attempts of live rollouts that exceeded their timeout / went silent."""

    @abstractmethod
    async def _enqueue_many(self, drafts: list[arguments.RolloutDraft]) -> list[Rollout]:
        """Store new `queuing` rollouts (all or none) at the tail of the queue."""

    @abstractmethod
    async def _dequeue(self, limit: int, worker_id: Optional[str], run: Optional[str] = None) -> list[AttemptedRollout]:
        """Claim up to `limit` queued rollouts (of `run` only, when given), each with a new attempt; records the
        worker's dequeue."""

    @abstractmethod
    async def _finished(self, rollout_ids: list[str]) -> tuple[list[Rollout], bool]:
        """Terminal rollouts among the ids (input order) and whether any known one is still pending."""

    @abstractmethod
    async def _next_sequence_ids(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        """Allocate the next span sequence id of each `(rollout_id, attempt_id)`, checking both exist."""

    @abstractmethod
    async def _put_resources(self, resources_id: Optional[str], resources: NamedResources) -> ResourcesUpdate:
        """Create (under a new id when None) or replace a resources bundle and make it the latest."""

    @abstractmethod
    async def _start_now(self, draft: arguments.RolloutDraft, worker_id: Optional[str]) -> AttemptedRollout:
        """Store a new `preparing` rollout from `draft` with its first attempt (given to `worker_id`)."""

    @abstractmethod
    async def _apply_rollout_update(self, rollout_id: str, changes: dict[str, Any], resources_id: Any) -> Rollout:
        """Apply checked `changes` and `resources_id` (unless UNSET) to a rollout; a status follows the queue rules."""

    @abstractmethod
    async def _apply_attempt_update(self, rollout_id: str, attempt_id: str, changes: dict[str, Any]) -> Attempt:
        """Apply checked `changes` to an attempt (`attempt_id` may be "latest"), reassigning its worker if asked."""

    @abstractmethod
    async def _attempts_page(self, page: arguments.Page, rollout_id: str) -> PaginatedResult[Attempt]:
        """One page of a rollout's attempts."""

    @abstractmethod
    async def _rollouts_page(
        self,
        page: arguments.Page,
        filter_logic: FilterLogic,
        statuses: Optional[list[str]],
        ids: Optional[list[str]],
        id_contains: Optional[str],
    ) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
        """One page of the rollouts that match (each with its latest attempt, when it has one)."""

    @abstractmethod
    async def _spans_page(
        self,
        page: arguments.Page,
        filter_logic: FilterLogic,
        rollout_id: str,
        attempt_id: Optional[str],
        fields: arguments.SpanFieldFilters,
    ) -> PaginatedResult[Span]:
        """One page of a rollout's spans that match; `attempt_id` may be None (all), "latest", or an id."""

    @abstractmethod
    async def _resources_page(
        self, page: arguments.Page, resources_id: Optional[str], id_contains: Optional[str]
    ) -> PaginatedResult[ResourcesUpdate]:
        """One page of the resources bundles that match."""

    @abstractmethod
    async def _workers_page(
        self, page: arguments.Page, filter_logic: FilterLogic, statuses: Optional[list[str]], id_contains: Optional[str]
    ) -> PaginatedResult[Worker]:
        """One page of the workers that match."""

    # ---- the calls that only check arguments ----

    @tracked("rollouts")
    @healthcheck_before
    async def start_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
        worker_id: Optional[str] = None,
    ) -> AttemptedRollout:
        draft = arguments.rollout_draft(input, mode, resources_id, config, metadata)
        arguments.check_worker_id(worker_id)
        return await self._start_now(draft, worker_id)

    @tracked("rollouts")
    @healthcheck_before
    async def enqueue_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> Rollout:
        return (await self._enqueue_many([arguments.rollout_draft(input, mode, resources_id, config, metadata)]))[0]

    @tracked("rollouts")
    @healthcheck_before
    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        drafts = arguments.enqueue_drafts(rollouts)
        if not drafts:
            return []
        return await self._enqueue_many(drafts)

    @tracked("rollouts")
    @healthcheck_before
    async def dequeue_rollout(
        self, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> Optional[AttemptedRollout]:
        arguments.check_worker_id(worker_id)
        arguments.check_run(run)
        claimed = await self._dequeue(1, worker_id, run)
        return claimed[0] if claimed else None

    @tracked("rollouts")
    @healthcheck_before
    async def dequeue_many_rollouts(
        self, *, limit: int = 1, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> list[AttemptedRollout]:
        arguments.check_dequeue_limit(limit)
        arguments.check_worker_id(worker_id)
        arguments.check_run(run)
        if limit <= 0:
            return []
        return await self._dequeue(limit, worker_id, run)

    @tracked("rollouts")
    @healthcheck_before
    async def wait_for_dequeue(
        self, *, timeout: float, limit: int = 1, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> list[AttemptedRollout]:
        wait = arguments.check_dequeue_wait(timeout)
        arguments.check_dequeue_limit(limit)
        arguments.check_worker_id(worker_id)
        arguments.check_run(run)
        if limit <= 0:
            return []
        if wait == 0:
            return await self._dequeue(limit, worker_id, run)
        return await dequeue_when_available(
            self._queue_waiters,
            wait,
            self.queue_poll_seconds,
            lambda: self._dequeue(limit, worker_id, run),
            self._watchdog.maybe_scan,
        )

    @tracked("rollouts")
    @healthcheck_before
    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        deadline = arguments.check_wait_timeout(timeout)
        return await wait_until_finished(
            self._waiters,
            list(rollout_ids),
            deadline,
            self.wait_poll_seconds,
            self._finished,
            self._watchdog.maybe_scan,
        )

    @tracked("rollouts")
    @healthcheck_before
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
        changes = arguments.rollout_changes(input, mode, status, config, metadata)
        return await self._apply_rollout_update(rollout_id, changes, resources_id)

    @tracked("attempts")
    @healthcheck_before
    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: Any = UNSET,
        worker_id: Any = UNSET,
        last_heartbeat_time: Any = UNSET,
        metadata: Any = UNSET,
    ) -> Attempt:
        changes = arguments.attempt_changes(status, worker_id, last_heartbeat_time, metadata)
        return await self._apply_attempt_update(rollout_id, attempt_id, changes)

    @tracked("spans")
    @healthcheck_before
    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        return (await self._next_sequence_ids([(rollout_id, attempt_id)]))[0]

    @tracked("spans")
    @healthcheck_before
    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        pairs = [(r, a) for r, a in rollout_attempt_ids]
        if not pairs:
            return []
        return await self._next_sequence_ids(pairs)

    @tracked("resources")
    @healthcheck_before
    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        arguments.check_resources(resources)
        return await self._put_resources(None, resources)

    @tracked("resources")
    @healthcheck_before
    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        arguments.check_resources_id(resources_id)
        arguments.check_resources(resources)
        return await self._put_resources(resources_id, resources)

    # ---- queries: checked here, answered by the backend ----

    @tracked("rollouts")
    @healthcheck_before
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
        page = arguments.check_query("rollout", sort_by, sort_order, limit, offset, filter_logic)
        statuses, ids = arguments.rollout_query_filters(status_in, status, rollout_id_in, rollout_ids)
        return await self._rollouts_page(page, filter_logic, statuses, ids, rollout_id_contains)

    @tracked("attempts")
    @healthcheck_before
    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: Optional[str] = "sequence_id",
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Attempt]:
        return await self._attempts_page(
            arguments.check_query("attempt", sort_by, sort_order, limit, offset), rollout_id
        )

    @tracked("spans")
    @healthcheck_before
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
        page = arguments.check_query("span", sort_by, sort_order, limit, offset, filter_logic)
        fields = arguments.span_field_filters(
            trace_id, trace_id_contains, span_id, span_id_contains, parent_id, parent_id_contains, name, name_contains
        )
        return await self._spans_page(page, filter_logic, rollout_id, attempt_id, fields)

    @tracked("resources")
    @healthcheck_before
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
        page = arguments.check_query("resources", sort_by, sort_order, limit, offset)
        return await self._resources_page(page, resources_id, resources_id_contains)

    @tracked("workers")
    @healthcheck_before
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
        page = arguments.check_query("worker", sort_by, sort_order, limit, offset, filter_logic)
        return await self._workers_page(
            page, filter_logic, arguments.worker_status_filter(status_in), worker_id_contains
        )
