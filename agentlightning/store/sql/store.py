"""`SqlLightningStore`: the LightningStore contract over any `SqlEngine` (SQLite, PostgreSQL).

Every public call is one database transaction built from `StoreTransaction` steps, so a call is atomic
even when several processes share the database. Completions made through this object wake
`wait_for_rollouts` callers at once; completions by other processes are seen by polling every
`wait_poll_seconds`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, Callable, Optional, TypeVar, Union

from agentlightning.types import (
    Attempt,
    AttemptedRollout,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    Span,
    Worker,
)
from agentlightning.types.resources import validate_named_resources

from .. import _arguments as arguments
from .. import transitions
from .._backend import BackendLightningStore
from ..base import (
    UNSET,
    FilterLogic,
    LightningStoreCapabilities,
    LightningStoreStatistics,
    StorageUnavailableError,
    is_unset,
)
from ..tracking import tracked
from ..utils import Clock, new_resources_id, unhealthy_attempt_status
from ..watchdog import healthcheck_before
from . import reads
from .codec import to_json
from .engine import SqlEngine, SqlTransaction
from .idempotency import SqlIdempotencyLedger
from .query import Where
from .transaction import RolloutRecord, StoreTransaction

__all__ = ["SqlLightningStore"]

T = TypeVar("T")


class SqlLightningStore(BackendLightningStore):
    """The full store contract on a SQL database; subclasses pick the engine (SQLite, PostgreSQL).

    Args:
        engine: runs transactions against the database.
        scan_debounce_seconds: minimum time between watchdog scans (0 = scan before every call).
        clock: time source in seconds (tests inject a fake one); defaults to `time.time`.
        tracker: optional metrics backend; every public method reports `agl.<group>.total/duration`.
    """

    wait_poll_seconds: float = 0.5
    """How often `wait_for_rollouts` re-reads the database for completions made by other processes."""
    queue_poll_seconds: float = 1.0
    """How often a waiting `wait_for_dequeue` re-asks for rollouts other processes queued (this one's wake it)."""

    def __init__(
        self,
        engine: SqlEngine,
        *,
        scan_debounce_seconds: float = 10.0,
        clock: Optional[Clock] = None,
        tracker: Any = None,
    ) -> None:
        self._engine = engine
        self._ledger: Optional[SqlIdempotencyLedger] = None
        self._storage_problem: Optional[str] = None
        self._start_machinery(clock=clock, tracker=tracker, scan_debounce_seconds=scan_debounce_seconds)

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=False)

    async def close(self) -> None:
        await self._engine.close()

    def idempotency_ledger(self) -> SqlIdempotencyLedger:
        """Answers to retried requests in this database: every `agl store --n-workers N` process shares them."""
        if self._ledger is None:
            self._ledger = SqlIdempotencyLedger(self._engine, self._clock)
        return self._ledger

    # ---- running transactions ----

    async def _write(self, step: Callable[[StoreTransaction], Awaitable[T]], now: Optional[float] = None) -> T:
        at = self._clock() if now is None else now
        finished: list[str] = []
        queued: list[bool] = [False]

        async def body(tx: SqlTransaction) -> T:
            st = StoreTransaction(tx, at)
            result = await step(st)
            finished[:] = st.finished
            queued[0] = st.queued
            return result

        result = await self._run(body, write=True)
        for rollout_id in finished:
            self._waiters.notify(rollout_id)
        if queued[0]:
            self._queue_waiters.notify()
        return result

    async def _read(self, step: Callable[[StoreTransaction], Awaitable[T]]) -> T:
        now = self._clock()

        async def body(tx: SqlTransaction) -> T:
            return await step(StoreTransaction(tx, now))

        return await self._run(body, write=False)

    async def _run(self, body: Callable[[SqlTransaction], Awaitable[T]], *, write: bool) -> T:
        """Run a transaction; a database that refuses for want of room or write access is a StorageUnavailableError."""
        try:
            result = await self._engine.run(body, write=write)
        except Exception as exc:
            problem = self._engine.storage_problem(exc)
            if problem is None:
                raise
            self._storage_problem = problem
            raise StorageUnavailableError(
                f"{problem}; free disk space or make the storage writable, then retry (nothing was written)"
            ) from exc
        if write:
            self._storage_problem = None
        return result

    def storage_problem(self) -> Optional[str]:
        return self._storage_problem

    # ---- the watchdog ----

    async def _scan_unhealthy(self, now: float) -> None:
        """Mark latest attempts of live rollouts that exceeded their timeout / went silent."""

        async def find(st: StoreTransaction) -> list[str]:
            return await reads.unhealthy_rollout_ids(st, now)

        candidates = await self._read(find)
        if not candidates:
            return

        async def mark(st: StoreTransaction) -> None:
            # Re-check under lock: another process (or call) may have finished or marked them meanwhile.
            for rollout_id in candidates:
                record = await st.get_rollout(rollout_id, lock=True)
                if record is None or record.rollout.status not in transitions.LIVE_ROLLOUT_STATUSES:
                    continue
                attempt = await st.latest_attempt(rollout_id, lock=True)
                if attempt is None:
                    continue
                verdict = unhealthy_attempt_status(attempt, record.rollout.config, now)
                if verdict is not None:
                    await st.update_attempt(record, attempt, {"status": verdict})

        await self._write(mark, now)

    # ---- rollouts and the queue ----

    async def _start_now(self, draft: arguments.RolloutDraft, worker_id: Optional[str]) -> AttemptedRollout:
        async def step(st: StoreTransaction) -> AttemptedRollout:
            rollout = draft.build("preparing", await st.resolve_resources_id(draft.resources_id), st.now)
            await st.insert_rollouts([rollout])
            return await st.new_attempt(RolloutRecord(rollout, 0), worker_id)

        return await self._write(step)

    async def _enqueue_many(self, drafts: list[arguments.RolloutDraft]) -> list[Rollout]:
        async def step(st: StoreTransaction) -> list[Rollout]:
            resolved: dict[Optional[str], Optional[str]] = {}  # one lookup per distinct id, not per rollout
            for draft in drafts:
                if draft.resources_id not in resolved:
                    resolved[draft.resources_id] = await st.resolve_resources_id(draft.resources_id)
            rollouts = [draft.build("queuing", resolved[draft.resources_id], st.now) for draft in drafts]
            await st.insert_rollouts(rollouts)
            return [r.model_copy() for r in rollouts]

        return await self._write(step)

    async def _dequeue(self, limit: int, worker_id: Optional[str], run: Optional[str] = None) -> list[AttemptedRollout]:
        async def step(st: StoreTransaction) -> list[AttemptedRollout]:
            return await st.claim_from_queue(limit, worker_id, run)

        return await self._write(step)

    @tracked("attempts")
    @healthcheck_before
    async def start_attempt(self, rollout_id: str, worker_id: Optional[str] = None) -> AttemptedRollout:
        arguments.check_worker_id(worker_id)

        async def step(st: StoreTransaction) -> AttemptedRollout:
            return await st.new_attempt(await st.require_rollout(rollout_id), worker_id)

        return await self._write(step)

    async def _rollouts_page(
        self,
        page: arguments.Page,
        filter_logic: FilterLogic,
        statuses: Optional[list[str]],
        ids: Optional[list[str]],
        id_contains: Optional[str],
    ) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
        where = Where(self._engine.dialect, filter_logic)
        where.field(where.within("r.status", statuses))
        where.field(where.within("r.rollout_id", ids), where.contains("r.rollout_id", id_contains))

        async def step(st: StoreTransaction) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
            return await reads.rollouts_page(st, where, page.sort_by, page.sort_order, page.limit, page.offset)

        return await self._read(step)

    @tracked("rollouts")
    @healthcheck_before
    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        async def step(st: StoreTransaction) -> Optional[Rollout]:
            return await reads.rollout_by_id(st, rollout_id)

        return await self._read(step)

    async def _apply_rollout_update(self, rollout_id: str, changes: dict[str, Any], resources_id: Any) -> Rollout:
        if "input" in changes:
            to_json(changes["input"])  # fail before the transaction when the input cannot be stored

        async def step(st: StoreTransaction) -> Rollout:
            record = await st.require_rollout(rollout_id)
            step_changes = dict(changes)  # the engine may retry this step
            if not is_unset(resources_id):
                step_changes["resources_id"] = (
                    None if resources_id is None else await st.resolve_resources_id(resources_id)
                )
            new_status = step_changes.pop("status", record.rollout.status)
            return await st.set_rollout_status(record.rollout, new_status, direct=True, **step_changes)

        updated = await self._write(step)
        return updated.model_copy()

    async def _finished(self, rollout_ids: list[str]) -> tuple[list[Rollout], bool]:
        """Terminal rollouts among the ids (input order) and whether any known one is still pending."""

        async def step(st: StoreTransaction) -> tuple[dict[str, Rollout], bool]:
            return await reads.finished_rollouts(st, rollout_ids)

        by_id, pending = await self._read(step)
        finished = [by_id[rollout_id].model_copy() for rollout_id in rollout_ids if rollout_id in by_id]
        return finished, pending

    # ---- attempts ----

    async def _attempts_page(self, page: arguments.Page, rollout_id: str) -> PaginatedResult[Attempt]:
        where = Where(self._engine.dialect).require(("rollout_id = ?", [rollout_id]))

        async def step(st: StoreTransaction) -> PaginatedResult[Attempt]:
            return await reads.attempts_page(st, where, page.sort_by, page.sort_order, page.limit, page.offset)

        return await self._read(step)

    @tracked("attempts")
    @healthcheck_before
    async def get_latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        async def step(st: StoreTransaction) -> Optional[Attempt]:
            return await st.latest_attempt(rollout_id)

        return await self._read(step)

    async def _apply_attempt_update(self, rollout_id: str, attempt_id: str, changes: dict[str, Any]) -> Attempt:
        async def step(st: StoreTransaction) -> Attempt:
            record = await st.require_rollout(rollout_id)
            attempt = await st.require_attempt(rollout_id, attempt_id)
            transitions.check_attempt_update(attempt, record.attempt_count, changes)
            reassigned = transitions.worker_reassignment(attempt, changes)
            if reassigned is not None:
                await st.claim_for_worker(reassigned)
            return await st.update_attempt(record, attempt, changes)

        return await self._write(step)

    # ---- spans ----

    @tracked("spans")
    @healthcheck_before
    async def add_span(self, span: Span) -> Optional[Span]:
        spans = [arguments.coerce_span(span)]

        async def step(st: StoreTransaction) -> list[Span]:
            return await st.insert_spans(spans)

        stored = await self._write(step)
        return stored[0] if stored else None

    @tracked("spans")
    @healthcheck_before
    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        spans_ = arguments.coerce_spans(spans)
        if not spans_:
            return []

        async def step(st: StoreTransaction) -> list[Span]:
            return await st.insert_spans(spans_)

        return await self._write(step)

    async def _next_sequence_ids(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        async def step(st: StoreTransaction) -> list[int]:
            for rollout_id, _ in pairs:  # ids count per rollout: any attempt id is taken, as in v0.3
                await st.require_rollout(rollout_id, lock=False)
            return await st.next_span_sequence_ids([rollout_id for rollout_id, _ in pairs])

        return await self._write(step)

    async def _spans_page(
        self,
        page: arguments.Page,
        filter_logic: FilterLogic,
        rollout_id: str,
        attempt_id: Optional[str],
        fields: arguments.SpanFieldFilters,
    ) -> PaginatedResult[Span]:
        where = Where(self._engine.dialect, filter_logic)
        for column, exact, contains in fields:
            where.field(where.exact(column, exact), where.contains(column, contains))

        async def step(st: StoreTransaction) -> PaginatedResult[Span]:
            return await reads.spans_page(
                st, rollout_id, attempt_id, where, page.sort_by, page.sort_order, page.limit, page.offset
            )

        return await self._read(step)

    # ---- resources ----

    async def _put_resources(self, resources_id: Optional[str], resources: NamedResources) -> ResourcesUpdate:
        validated = validate_named_resources(resources)
        document = to_json(validated)

        async def step(st: StoreTransaction) -> ResourcesUpdate:
            target = resources_id or new_resources_id()
            create_time, version = await st.put_resources(target, document)
            return ResourcesUpdate.model_construct(
                resources_id=target, create_time=create_time, update_time=st.now, version=version, resources=validated
            )

        return await self._write(step)

    @tracked("resources")
    @healthcheck_before
    async def get_resources_by_id(self, resources_id: str) -> Optional[ResourcesUpdate]:
        async def step(st: StoreTransaction) -> Optional[ResourcesUpdate]:
            return await reads.resources_by_id(st, resources_id)

        return await self._read(step)

    @tracked("resources")
    @healthcheck_before
    async def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        async def step(st: StoreTransaction) -> Optional[ResourcesUpdate]:
            return await reads.latest_resources(st)

        return await self._read(step)

    async def _resources_page(
        self, page: arguments.Page, resources_id: Optional[str], id_contains: Optional[str]
    ) -> PaginatedResult[ResourcesUpdate]:
        where = Where(self._engine.dialect)
        where.field(where.exact("resources_id", resources_id), where.contains("resources_id", id_contains))

        async def step(st: StoreTransaction) -> PaginatedResult[ResourcesUpdate]:
            return await reads.resources_page(st, where, page.sort_by, page.sort_order, page.limit, page.offset)

        return await self._read(step)

    # ---- workers ----

    async def _workers_page(
        self, page: arguments.Page, filter_logic: FilterLogic, statuses: Optional[list[str]], id_contains: Optional[str]
    ) -> PaginatedResult[Worker]:
        where = Where(self._engine.dialect, filter_logic)
        where.field(where.within("status", statuses))
        where.field(where.contains("worker_id", id_contains))

        async def step(st: StoreTransaction) -> PaginatedResult[Worker]:
            return await reads.workers_page(st, where, page.sort_by, page.sort_order, page.limit, page.offset)

        return await self._read(step)

    @tracked("workers")
    @healthcheck_before
    async def get_worker_by_id(self, worker_id: str) -> Optional[Worker]:
        async def step(st: StoreTransaction) -> Optional[Worker]:
            return await reads.worker_by_id(st, worker_id)

        return await self._read(step)

    @tracked("workers")
    @healthcheck_before
    async def update_worker(self, worker_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        changes = arguments.worker_changes(worker_id, heartbeat_stats)

        async def step(st: StoreTransaction) -> Worker:
            worker = await st.touch_worker(worker_id, **changes, last_heartbeat_time=st.now)
            await st.heartbeat_current_attempt(worker)
            return worker

        return await self._write(step)

    # ---- statistics ----

    @tracked("store")
    async def statistics(self) -> LightningStoreStatistics:
        async def step(st: StoreTransaction) -> tuple[int, int, int, int, int]:
            return await reads.totals(st)

        rollouts, attempts, spans, resources, workers = await self._read(step)
        return LightningStoreStatistics(
            name=type(self).__name__,
            total_rollouts=rollouts,
            total_attempts=attempts,
            total_spans=spans,
            total_resources=resources,
            total_workers=workers,
            uptime=self._clock() - self._started_at,
        )
