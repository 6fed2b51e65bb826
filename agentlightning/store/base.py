"""The LightningStore contract: the hub every algorithm, runner and tracer talks to."""

from __future__ import annotations

import asyncio
import time
from abc import ABC
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Optional, TypedDict, Union

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

from ._finite import check_dequeue_wait

if TYPE_CHECKING:
    from .idempotency import IdempotencyLedger

__all__ = [
    "StorageUnavailableError",
    "UnknownEntityError",
    "UNSET",
    "Unset",
    "is_unset",
    "LightningStore",
    "LightningStoreCapabilities",
    "LightningStoreStatistics",
    "SortOrder",
    "FilterLogic",
]


class StorageUnavailableError(RuntimeError):
    """The store's storage refuses the call (disk full, read-only file or database); nothing was written.

    Over HTTP it is answered 503 (`error_type` `StorageUnavailableError`), and `/v1/agl/health` reports it.
    """


class UnknownEntityError(ValueError):
    """A call names a rollout, attempt or resources bundle the store does not hold (HTTP 404, `ValueError`)."""


SortOrder = Literal["asc", "desc"]
FilterLogic = Literal["and", "or"]


class Unset:
    """Type of `UNSET`: marks an argument the caller did not give (as opposed to an explicit None)."""

    _instance: Optional[Unset] = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "UNSET"


UNSET: Any = Unset()


def is_unset(value: Any) -> bool:
    return isinstance(value, Unset)


class LightningStoreCapabilities(TypedDict, total=False):
    """What a store guarantees: safe across threads/event loops, shared without copies, OTLP ingestion."""

    thread_safe: bool
    async_safe: bool
    zero_copy: bool
    otlp_traces: bool


class LightningStoreStatistics(TypedDict, total=False):
    name: str
    total_rollouts: int
    total_attempts: int
    total_spans: int
    total_resources: int
    total_workers: int
    uptime: float
    total_span_bytes: int
    total_record_bytes: int
    eviction_threshold_bytes: int
    safe_threshold_bytes: int
    memory_capacity_bytes: int


def _unimplemented(store: object, method: str) -> str:
    return f"{type(store).__name__} does not implement LightningStore.{method}"


class LightningStore(ABC):  # noqa: B024 (ABC so backends can declare their own abstract steps)
    """Rollouts, attempts, spans, versioned resources and workers behind one async API.

    Every backend (memory, SQLite, PostgreSQL, HTTP client) implements this contract and passes the
    same conformance suite. Status rules are those of `agentlightning.store.utils`.

    Every method raises `NotImplementedError` until a subclass overrides it (none is abstract), so a
    partial store, e.g. a test double with only the calls it needs, can be instantiated.
    """

    # How often the default `wait_for_dequeue` re-asks an empty queue.
    queue_poll_seconds: float = 0.5

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=False, async_safe=False, zero_copy=False, otlp_traces=False)

    async def statistics(self) -> LightningStoreStatistics:
        raise NotImplementedError(f"{type(self).__name__} does not report statistics")

    def otlp_traces_endpoint(self) -> str:
        """URL (ending in /v1/traces) where this store accepts OTLP/HTTP spans."""
        raise NotImplementedError(f"{type(self).__name__} does not accept OTLP traces")

    async def close(self) -> None:
        """Release connections and background resources. Idempotent."""

    def storage_problem(self) -> Optional[str]:
        """Why the store's storage refused its last write (disk full, read-only), or None when it writes fine.

        Cleared by the next write that succeeds. Stores that keep data in memory always answer None.
        """
        return None

    def idempotency_ledger(self) -> Optional[IdempotencyLedger]:
        """A ledger of request answers in this store's database, shared by every process serving it.

        None for stores that live in one process (their server remembers answers in memory).
        """
        return None

    async def close_loop_resources(self) -> None:
        """Release only what the store keeps for the running event loop (an HTTP client's session).

        Call it before closing an event loop you created to reach the store from another thread; the
        store stays usable from other loops. Stores without per-loop state do nothing.
        """

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
        """Create a rollout in `preparing` with attempt #1, bypassing the queue."""
        raise NotImplementedError(_unimplemented(self, "start_rollout"))

    async def enqueue_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> Rollout:
        """Append a new `queuing` rollout to the tail of the queue."""
        raise NotImplementedError(_unimplemented(self, "enqueue_rollout"))

    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        """Enqueue several rollouts, preserving order."""
        return [
            await self.enqueue_rollout(
                input=r.input, mode=r.mode, resources_id=r.resources_id, config=r.config, metadata=r.metadata
            )
            for r in rollouts
        ]

    async def dequeue_rollout(
        self, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> Optional[AttemptedRollout]:
        """Claim the head of the queue (FIFO) and create its next attempt; None when empty.

        With `run`, only rollouts whose `metadata["agl_run"]` is `run` are claimed (the queue of one run
        on a store several runs share); the others stay queued in their order.
        """
        raise NotImplementedError(_unimplemented(self, "dequeue_rollout"))

    async def dequeue_many_rollouts(
        self, *, limit: int = 1, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> list[AttemptedRollout]:
        """Claim up to `limit` rollouts (of `run` only, when given)."""
        claimed: list[AttemptedRollout] = []
        for _ in range(max(limit, 0)):
            rollout = await self.dequeue_rollout(worker_id=worker_id, **_run_filter(run))
            if rollout is None:
                break
            claimed.append(rollout)
        return claimed

    async def wait_for_dequeue(
        self, *, timeout: float, limit: int = 1, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> list[AttemptedRollout]:
        """Claim up to `limit` rollouts (of `run` only, when given), waiting up to `timeout` seconds for one while the queue is empty.

        Returns as soon as something is claimed, or an empty list once `timeout` passed (`timeout=0` is
        `dequeue_many_rollouts`). This default re-asks `dequeue_many_rollouts` every `queue_poll_seconds`;
        the built-in stores are woken by the enqueue instead (the HTTP client long-polls its server).
        """
        deadline = time.monotonic() + check_dequeue_wait(timeout)
        if limit <= 0:
            return []
        while True:
            claimed = await self.dequeue_many_rollouts(limit=limit, worker_id=worker_id, **_run_filter(run))
            remaining = deadline - time.monotonic()
            if claimed or remaining <= 0:
                return claimed
            await asyncio.sleep(min(remaining, self.queue_poll_seconds))

    async def start_attempt(self, rollout_id: str, worker_id: Optional[str] = None) -> AttemptedRollout:
        """Create a new attempt for an existing rollout (manual retry)."""
        raise NotImplementedError(_unimplemented(self, "start_attempt"))

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
        """Rollouts matching the filters; those with attempts come back as `AttemptedRollout`."""
        raise NotImplementedError(_unimplemented(self, "query_rollouts"))

    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        raise NotImplementedError(_unimplemented(self, "get_rollout_by_id"))

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
        """Change the given fields; status changes follow the queue rules (requeue, end time)."""
        raise NotImplementedError(_unimplemented(self, "update_rollout"))

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        """Rollouts among `rollout_ids` that are terminal by the deadline, in input order.

        `timeout=0` is a non-blocking snapshot; `None` waits until all are terminal. Unknown ids are omitted.
        """
        raise NotImplementedError(_unimplemented(self, "wait_for_rollouts"))

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
        raise NotImplementedError(_unimplemented(self, "query_attempts"))

    async def get_latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        raise NotImplementedError(_unimplemented(self, "get_latest_attempt"))

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: Any = UNSET,
        worker_id: Any = UNSET,
        last_heartbeat_time: Any = UNSET,
        metadata: Any = UNSET,
    ) -> Attempt:
        """Change an attempt (`attempt_id` may be "latest"); the latest attempt's status drives the rollout."""
        raise NotImplementedError(_unimplemented(self, "update_attempt"))

    async def finish_attempt(
        self, rollout_id: str, attempt_id: str, status: AttemptStatus, spans: Sequence[Span] = ()
    ) -> FinishedAttempt:
        """Store an attempt's last spans, then set its final `status`: one call (one request over HTTP).

        The same as `add_many_spans(spans)` followed by `update_attempt(rollout_id, attempt_id, status=status)`:
        spans with a negative `sequence_id` (`AUTO_SEQUENCE_ID`) are numbered by the store, and they are stored even when the status
        update is then refused (e.g. `StaleAttemptError`). Every span must belong to this attempt.
        """
        for span in spans:
            if (span.rollout_id, span.attempt_id) != (rollout_id, attempt_id):
                raise ValueError(
                    f"span {span.span_id!r} belongs to rollout {span.rollout_id!r} attempt {span.attempt_id!r}, "
                    f"not to the attempt being finished ({rollout_id!r}, {attempt_id!r}); send it with add_many_spans"
                )
        stored = list(await self.add_many_spans(spans)) if spans else []
        attempt = await self.update_attempt(rollout_id, attempt_id, status=status)
        return FinishedAttempt(attempt=attempt, spans=stored)

    # ---- spans ----

    async def add_span(self, span: Span) -> Optional[Span]:
        """Store a span of an existing rollout attempt; the span is also that attempt's heartbeat.

        A span with a negative `sequence_id` (`AUTO_SEQUENCE_ID`) gets the rollout's next sequence id (the stored
        span carries it). Any other id, 0 included, is stored as given, and the rollout's next ids follow the
        highest one stored (as in v0.3).
        """
        raise NotImplementedError(_unimplemented(self, "add_span"))

    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        """Store several spans at once; those with a negative `sequence_id` get their rollout's next ids, in order.

        Lets a writer store spans with one call instead of allocating ids first (one round trip over HTTP).
        """
        unsequenced = [i for i, span in enumerate(spans) if span.sequence_id < 0]
        if unsequenced:
            pairs = [(spans[i].rollout_id, spans[i].attempt_id) for i in unsequenced]
            allocated = dict(zip(unsequenced, await self.get_many_span_sequence_ids(pairs), strict=True))
            spans = [
                span.model_copy(update={"sequence_id": allocated[i]}) if i in allocated else span
                for i, span in enumerate(spans)
            ]
        stored: list[Span] = []
        for span in spans:
            result = await self.add_span(span)
            if result is not None:
                stored.append(result)
        return stored

    async def add_otel_span(
        self,
        rollout_id: str,
        attempt_id: str,
        readable_span: ReadableSpan,
        sequence_id: Optional[int] = None,
    ) -> Optional[Span]:
        """Convert and store an OpenTelemetry span, allocating a sequence id when none is given."""
        if sequence_id is None:
            sequence_id = await self.get_next_span_sequence_id(rollout_id, attempt_id)
        return await self.add_span(Span.from_opentelemetry(readable_span, rollout_id, attempt_id, sequence_id))

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        """Next sequence id for a span of this rollout: 1, 2, 3, ... strictly increasing per rollout."""
        raise NotImplementedError(_unimplemented(self, "get_next_span_sequence_id"))

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        return [await self.get_next_span_sequence_id(r, a) for r, a in rollout_attempt_ids]

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
        """Spans of a rollout; `attempt_id` may be None (all), "latest", or an id."""
        raise NotImplementedError(_unimplemented(self, "query_spans"))

    # ---- resources ----

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        """Store a new resources bundle under a fresh id (version 1); it becomes the latest."""
        raise NotImplementedError(_unimplemented(self, "add_resources"))

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        """Upsert resources under `resources_id` (version 1 when new, else version + 1); becomes the latest."""
        raise NotImplementedError(_unimplemented(self, "update_resources"))

    async def get_resources_by_id(self, resources_id: str) -> Optional[ResourcesUpdate]:
        raise NotImplementedError(_unimplemented(self, "get_resources_by_id"))

    async def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        raise NotImplementedError(_unimplemented(self, "get_latest_resources"))

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
        raise NotImplementedError(_unimplemented(self, "query_resources"))

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
        raise NotImplementedError(_unimplemented(self, "query_workers"))

    async def get_worker_by_id(self, worker_id: str) -> Optional[Worker]:
        raise NotImplementedError(_unimplemented(self, "get_worker_by_id"))

    async def update_worker(self, worker_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        """Record a worker heartbeat (upserting the worker). Not an attempt heartbeat."""
        raise NotImplementedError(_unimplemented(self, "update_worker"))


def _run_filter(run: Optional[str]) -> dict[str, str]:
    """`run=` only when a run is asked for: stores written against v0.3 know no such argument."""
    return {} if run is None else {"run": run}
