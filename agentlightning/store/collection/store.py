"""`CollectionBasedLightningStore`: the store's state machine, written once against `LightningCollections`.

Rules (SPEC 3.1/3.2, Appendix B) come from `agentlightning.store.utils`; this module decides where they
apply: which calls create attempts, how the queue follows rollout status, how spans count as heartbeats,
and when the watchdog may mark attempts `timeout` / `unresponsive`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any, Optional, Union

from agentlightning.types import (
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    EnqueueRolloutRequest,
    FilterOptions,
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
from agentlightning.types.resources import validate_named_resources

from ..base import UNSET, FilterLogic, LightningStore, LightningStoreStatistics, SortOrder, is_unset
from ..utils import (
    Clock,
    check_attempt_status,
    check_filter_logic,
    check_mode,
    check_pagination,
    check_rollout_status,
    check_sort,
    check_worker_status,
    is_queuing,
    is_terminal,
    merge_status_filters,
    new_attempt_id,
    new_resources_id,
    new_rollout_id,
    rollout_status_from_attempt,
    unhealthy_attempt_status,
    worker_status_from_attempt,
)
from ..watchdog import Watchdog, healthcheck_before
from .base import LightningCollections
from .tracking import register_store_metrics, tracked
from .waiters import CompletionWaiters

__all__ = ["CollectionBasedLightningStore"]

_LATEST_RESOURCES_KEY = "latest_resources_id"
_LIVE_ROLLOUT_STATUSES = ["preparing", "running"]


def _coerce_config(config: Any) -> RolloutConfig:
    if config is None:
        return RolloutConfig()
    if isinstance(config, RolloutConfig):
        return config.model_copy(deep=True)
    if isinstance(config, dict):
        return RolloutConfig.model_validate(config)
    raise ValueError(f"config must be a RolloutConfig or a dict, got {type(config).__name__}")


def _coerce_metadata(metadata: Any, what: str = "metadata") -> Optional[dict[str, Any]]:
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise ValueError(f"{what} must be a dict or None, got {type(metadata).__name__}")
    return copy.deepcopy(metadata)


def _coerce_span(span: Any) -> Span:
    if isinstance(span, Span):
        return span
    if isinstance(span, dict):
        return Span.model_validate(span)
    raise ValueError(f"expected a Span, got {type(span).__name__}")


def _attempted(rollout: Rollout, attempt: Attempt) -> AttemptedRollout:
    # Both parts are validated models of the same rollout, so skip re-validation on this hot path.
    return AttemptedRollout.model_construct(**dict(rollout), attempt=attempt)


def _plain(rollout: Rollout) -> Rollout:
    return rollout.model_copy()


def _by_rollout(rollout_id: str) -> FilterOptions:
    return {"_must": {"rollout_id": {"exact": rollout_id}}}


class CollectionBasedLightningStore(LightningStore):
    """The full store contract on top of any `LightningCollections` backend.

    Args:
        collections: where the data lives.
        read_snapshot: make multi-step reads (e.g. rollouts plus their latest attempts) one snapshot.
        tracker: optional metrics backend; every public method reports `agl.<group>.total/duration`.
        scan_debounce_seconds: minimum time between watchdog scans (0 = scan before every call).
        clock: time source in seconds (tests inject a fake one); defaults to `time.time`.
    """

    # `wait_for_rollouts` re-checks at least this often, for changes another process made.
    wait_poll_seconds: float = 10.0

    def __init__(
        self,
        collections: LightningCollections,
        *,
        read_snapshot: bool = False,
        tracker: Any = None,
        scan_debounce_seconds: float = 10.0,
        clock: Optional[Clock] = None,
    ) -> None:
        self.collections = collections
        self._read_snapshot = read_snapshot
        self._clock: Clock = clock or time.time
        self._tracker = tracker
        if tracker is not None:
            register_store_metrics(tracker)
        self._watchdog = Watchdog(self._scan_unhealthy, clock=self._clock, debounce_seconds=scan_debounce_seconds)
        self._waiters = CompletionWaiters()
        self._started_at = self._clock()

    # ---- helpers used inside an atomic block ----

    def _now(self) -> float:
        return self._clock()

    def _reads(self) -> Any:
        return self.collections.atomic(mode="r", snapshot=self._read_snapshot)

    def _writes(self) -> Any:
        return self.collections.atomic(mode="rw")

    async def _require_rollout(self, c: LightningCollections, rollout_id: str) -> Rollout:
        rollout = await c.rollouts.get(rollout_id)
        if rollout is None:
            raise ValueError(f"rollout {rollout_id!r} not found; was it enqueued in this store?")
        return rollout

    async def _latest_attempt(self, c: LightningCollections, rollout_id: str) -> Optional[Attempt]:
        page = await c.attempts.query(_by_rollout(rollout_id), sort_by="sequence_id", sort_order="desc", limit=1)
        return page.items[0] if page.items else None

    async def _require_attempt(self, c: LightningCollections, rollout_id: str, attempt_id: str) -> Attempt:
        if attempt_id == "latest":
            attempt = await self._latest_attempt(c, rollout_id)
            if attempt is None:
                raise ValueError(f"rollout {rollout_id!r} has no attempts yet; dequeue or start one first")
            return attempt
        attempt = await c.attempts.get(attempt_id)
        if attempt is None or attempt.rollout_id != rollout_id:
            raise ValueError(f"attempt {attempt_id!r} not found in rollout {rollout_id!r}")
        return attempt

    async def _resolve_resources_id(self, c: LightningCollections, resources_id: Optional[str]) -> Optional[str]:
        if resources_id is None:
            return await c.store_meta.get(_LATEST_RESOURCES_KEY)
        if not isinstance(resources_id, str):
            raise ValueError(f"resources_id must be a string, got {type(resources_id).__name__}")
        if await c.resources.get(resources_id) is None:
            raise ValueError(f"resources {resources_id!r} not found; add them with add_resources/update_resources")
        return resources_id

    async def _set_rollout_status(
        self, c: LightningCollections, rollout: Rollout, status: RolloutStatus, now: float, **changes: Any
    ) -> Rollout:
        """Apply a status (and other field changes): keep the queue in step, stamp or clear `end_time`."""
        previous = rollout.status
        if status != previous:
            changes["status"] = status
            if is_terminal(status):
                changes["end_time"] = now
            elif rollout.end_time is not None:
                changes["end_time"] = None
        updated = rollout.model_copy(update=changes) if changes else rollout
        await c.rollouts.update(updated)
        if is_queuing(status):
            await c.rollout_queue.enqueue([rollout.rollout_id])
        elif is_queuing(previous):
            await c.rollout_queue.remove(rollout.rollout_id)
        if status != previous and is_terminal(status):
            self._waiters.notify(rollout.rollout_id)
        return updated

    async def _touch_worker(self, c: LightningCollections, worker_id: str, **changes: Any) -> Worker:
        worker = await c.workers.get(worker_id)
        if worker is None:
            worker = Worker(worker_id=worker_id, **changes)
        elif changes:
            worker = worker.model_copy(update=changes)
        await c.workers.upsert(worker)
        return worker

    async def _claim_for_worker(self, c: LightningCollections, attempt: Attempt, now: float) -> None:
        if attempt.worker_id is not None:
            await self._touch_worker(
                c,
                attempt.worker_id,
                status="busy",
                last_busy_time=now,
                current_rollout_id=attempt.rollout_id,
                current_attempt_id=attempt.attempt_id,
            )

    async def _sync_worker_status(self, c: LightningCollections, attempt: Attempt, now: float) -> None:
        """Worker status follows its attempt: finished -> idle, stale -> unknown, otherwise busy."""
        if attempt.worker_id is None:
            return
        status: WorkerStatus = worker_status_from_attempt(attempt.status)
        if status == "busy":
            await self._claim_for_worker(c, attempt, now)
            return
        worker = await c.workers.get(attempt.worker_id)
        if worker is not None and worker.current_attempt_id not in (None, attempt.attempt_id):
            return  # the worker already moved on to another attempt
        changes: dict[str, Any] = {"status": status}
        if status == "idle":
            changes["last_idle_time"] = now
        await self._touch_worker(c, attempt.worker_id, **changes)

    async def _new_attempt(
        self, c: LightningCollections, rollout: Rollout, worker_id: Optional[str], now: float
    ) -> AttemptedRollout:
        count = await c.attempts.count(_by_rollout(rollout.rollout_id))
        attempt = Attempt(
            rollout_id=rollout.rollout_id,
            attempt_id=new_attempt_id(),
            sequence_id=count + 1,
            start_time=now,
            worker_id=worker_id,
        )
        await c.attempts.insert(attempt)
        rollout = await self._set_rollout_status(c, rollout, "preparing", now)
        await self._claim_for_worker(c, attempt, now)
        return _attempted(rollout, attempt)

    async def _update_attempt(
        self, c: LightningCollections, rollout: Rollout, attempt: Attempt, changes: dict[str, Any], now: float
    ) -> Attempt:
        """Change an attempt; a status change updates its worker and, for the latest attempt, the rollout."""
        status: Optional[AttemptStatus] = changes.get("status")
        if status in ("succeeded", "failed"):
            changes["end_time"] = now
        updated = attempt.model_copy(update=changes)
        await c.attempts.update(updated)
        if status is None:
            return updated
        await self._sync_worker_status(c, updated, now)
        # A cancelled rollout stays cancelled whatever its attempts report afterwards.
        if rollout.status != "cancelled" and await self._is_latest(c, updated):
            await self._set_rollout_status(c, rollout, rollout_status_from_attempt(updated, rollout.config), now)
        return updated

    async def _is_latest(self, c: LightningCollections, attempt: Attempt) -> bool:
        return attempt.sequence_id >= await c.attempts.count(_by_rollout(attempt.rollout_id))

    async def _with_latest_attempts(
        self, c: LightningCollections, rollouts: list[Rollout]
    ) -> list[Union[Rollout, AttemptedRollout]]:
        if not rollouts:
            return []
        ids = [r.rollout_id for r in rollouts]
        attempts = await c.attempts.query({"_must": {"rollout_id": {"within": ids}}})
        latest: dict[str, Attempt] = {}
        for attempt in attempts.items:
            known = latest.get(attempt.rollout_id)
            if known is None or attempt.sequence_id > known.sequence_id:
                latest[attempt.rollout_id] = attempt
        out: list[Union[Rollout, AttemptedRollout]] = []
        for rollout in rollouts:
            attempt = latest.get(rollout.rollout_id)
            out.append(_attempted(rollout, attempt) if attempt is not None else _plain(rollout))
        return out

    # ---- spans: the hooks a backend may refine (memory accounting, eviction) ----

    async def _store_spans(self, c: LightningCollections, spans: list[Span]) -> list[Span]:
        """Persist validated spans; returns those actually stored. Re-adding a span id replaces it."""
        for span in spans:
            await c.spans.upsert(span)
        return spans

    async def _check_spans_readable(self, c: LightningCollections, rollout_id: str) -> None:
        """Raise when this rollout's spans can no longer be served (e.g. evicted)."""

    async def _insert_spans(self, c: LightningCollections, spans: list[Span], now: float) -> list[Span]:
        # Validate everything first so a bad span in a batch writes nothing.
        rollouts: dict[str, Rollout] = {}
        attempts: dict[str, Attempt] = {}
        for span in spans:
            rollout = rollouts.get(span.rollout_id)
            if rollout is None:
                found = await c.rollouts.get(span.rollout_id)
                if found is None:
                    raise ValueError(
                        f"span {span.span_id!r} refers to rollout {span.rollout_id!r}, which does not exist"
                    )
                rollouts[span.rollout_id] = rollout = found
            if span.attempt_id not in attempts:
                attempt = await c.attempts.get(span.attempt_id)
                if attempt is None or attempt.rollout_id != span.rollout_id:
                    raise ValueError(
                        f"span {span.span_id!r} refers to attempt {span.attempt_id!r}, which does not exist in "
                        f"rollout {span.rollout_id!r}"
                    )
                attempts[span.attempt_id] = attempt
        for span in spans:
            await c.span_sequence_ids.chmax(span.rollout_id, span.sequence_id)
        stored = await self._store_spans(c, spans)
        for attempt in attempts.values():
            await self._heartbeat_from_span(c, rollouts[attempt.rollout_id], attempt, now)
        return stored

    async def _heartbeat_from_span(
        self, c: LightningCollections, rollout: Rollout, attempt: Attempt, now: float
    ) -> None:
        """A span is a heartbeat; the first one (or one after going unresponsive) means `running`."""
        if attempt.status not in ("preparing", "unresponsive"):
            await c.attempts.update(attempt.model_copy(update={"last_heartbeat_time": now}))
            return
        running = attempt.model_copy(update={"last_heartbeat_time": now, "status": "running"})
        await c.attempts.update(running)
        await self._sync_worker_status(c, running, now)
        if rollout.status in ("preparing", "requeuing") and await self._is_latest(c, running):
            await self._set_rollout_status(c, rollout, "running", now)

    # ---- the watchdog ----

    async def _scan_unhealthy(self, now: float) -> None:
        """Mark latest attempts of live rollouts that exceeded their timeout / went silent."""
        async with self._writes() as c:
            live = await c.rollouts.query({"status": {"within": _LIVE_ROLLOUT_STATUSES}})
            for rollout in live.items:
                config = rollout.config
                if config.timeout_seconds is None and config.unresponsive_seconds is None:
                    continue
                attempt = await self._latest_attempt(c, rollout.rollout_id)
                if attempt is None:
                    continue
                verdict = unhealthy_attempt_status(attempt, config, now)
                if verdict is not None:
                    await self._update_attempt(c, rollout, attempt, {"status": verdict}, now)

    # ---- rollouts and the queue ----

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
        check_mode(mode)
        config_ = _coerce_config(config)
        metadata_ = _coerce_metadata(metadata)
        async with self._writes() as c:
            now = self._now()
            rollout = Rollout.model_construct(
                rollout_id=new_rollout_id(),
                input=input,
                start_time=now,
                end_time=None,
                mode=mode,
                resources_id=await self._resolve_resources_id(c, resources_id),
                status="preparing",
                config=config_,
                metadata=metadata_,
            )
            await c.rollouts.insert(rollout)
            return await self._new_attempt(c, rollout, worker_id, now)

    async def _enqueue_many(self, requests: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        prepared = []
        for request in requests:
            check_mode(request.mode)
            prepared.append((request, _coerce_config(request.config), _coerce_metadata(request.metadata)))
        async with self._writes() as c:
            now = self._now()
            rollouts: list[Rollout] = []
            for request, config, metadata in prepared:
                rollouts.append(
                    Rollout.model_construct(
                        rollout_id=new_rollout_id(),
                        input=request.input,
                        start_time=now,
                        end_time=None,
                        mode=request.mode,
                        resources_id=await self._resolve_resources_id(c, request.resources_id),
                        status="queuing",
                        config=config,
                        metadata=metadata,
                    )
                )
            for rollout in rollouts:
                await c.rollouts.insert(rollout)
            await c.rollout_queue.enqueue([r.rollout_id for r in rollouts])
            return [_plain(r) for r in rollouts]

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
        request = EnqueueRolloutRequest.model_construct(
            input=input, mode=mode, resources_id=resources_id, config=config, metadata=metadata
        )
        return (await self._enqueue_many([request]))[0]

    @tracked("rollouts")
    @healthcheck_before
    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        requests = [
            r if isinstance(r, EnqueueRolloutRequest) else EnqueueRolloutRequest.model_validate(r) for r in rollouts
        ]
        return await self._enqueue_many(requests)

    async def _dequeue(self, limit: int, worker_id: Optional[str]) -> list[AttemptedRollout]:
        async with self._writes() as c:
            now = self._now()
            claimed: list[AttemptedRollout] = []
            while len(claimed) < limit:
                ids = await c.rollout_queue.dequeue(1)
                if not ids:
                    break
                rollout = await c.rollouts.get(ids[0])
                if rollout is None or not is_queuing(rollout.status):
                    continue  # stale entry: the rollout moved on while queued
                claimed.append(await self._new_attempt(c, rollout, worker_id, now))
            if worker_id is not None:
                if claimed:
                    await self._touch_worker(c, worker_id, last_dequeue_time=now)
                else:
                    await self._touch_worker(c, worker_id, last_dequeue_time=now, status="idle", last_idle_time=now)
            return claimed

    @tracked("rollouts")
    @healthcheck_before
    async def dequeue_rollout(self, worker_id: Optional[str] = None) -> Optional[AttemptedRollout]:
        claimed = await self._dequeue(1, worker_id)
        return claimed[0] if claimed else None

    @tracked("rollouts")
    @healthcheck_before
    async def dequeue_many_rollouts(self, *, limit: int = 1, worker_id: Optional[str] = None) -> list[AttemptedRollout]:
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise ValueError(f"limit must be an integer, got {limit!r}")
        if limit <= 0:
            return []
        return await self._dequeue(limit, worker_id)

    @tracked("attempts")
    @healthcheck_before
    async def start_attempt(self, rollout_id: str, worker_id: Optional[str] = None) -> AttemptedRollout:
        async with self._writes() as c:
            rollout = await self._require_rollout(c, rollout_id)
            return await self._new_attempt(c, rollout, worker_id, self._now())

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
        check_filter_logic(filter_logic)
        check_sort("rollout", sort_by, sort_order)
        check_pagination(limit, offset)
        statuses = merge_status_filters(status_in, status)
        for value in statuses or []:
            check_rollout_status(value)
        ids = merge_status_filters(rollout_id_in, rollout_ids)
        filters: dict[str, Any] = {"_aggregate": filter_logic}
        if statuses is not None:
            filters["status"] = {"within": statuses}
        if ids is not None:
            filters["rollout_id"] = {"within": ids}
        if rollout_id_contains is not None:
            filters["rollout_id"] = {**filters.get("rollout_id", {}), "contains": rollout_id_contains}
        async with self._reads() as c:
            page = await c.rollouts.query(filters, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)
            items = await self._with_latest_attempts(c, page.items)
        return PaginatedResult[Union[Rollout, AttemptedRollout]].model_construct(
            items=items, limit=limit, offset=offset, total=page.total
        )

    @tracked("rollouts")
    @healthcheck_before
    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        async with self._reads() as c:
            rollout = await c.rollouts.get(rollout_id)
            if rollout is None:
                return None
            attempt = await self._latest_attempt(c, rollout_id)
        return _attempted(rollout, attempt) if attempt is not None else _plain(rollout)

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
        changes: dict[str, Any] = {}
        if not is_unset(input):
            changes["input"] = input
        if not is_unset(mode):
            check_mode(mode)
            changes["mode"] = mode
        if not is_unset(status):
            check_rollout_status(status)
        if not is_unset(config):
            if config is None:
                raise ValueError("config may not be None; pass a RolloutConfig (or leave it out)")
            changes["config"] = _coerce_config(config)
        if not is_unset(metadata):
            changes["metadata"] = _coerce_metadata(metadata)
        async with self._writes() as c:
            rollout = await self._require_rollout(c, rollout_id)
            if not is_unset(resources_id):
                changes["resources_id"] = (
                    None if resources_id is None else await self._resolve_resources_id(c, resources_id)
                )
            new_status = rollout.status if is_unset(status) else status
            updated = await self._set_rollout_status(c, rollout, new_status, self._now(), **changes)
        return _plain(updated)

    @tracked("rollouts")
    @healthcheck_before
    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValueError(f"timeout must be None or a number >= 0, got {timeout!r}")
        ids = list(rollout_ids)
        if timeout == 0:
            return (await self._finished(ids))[0]
        deadline = None if timeout is None else time.monotonic() + timeout
        waiter = self._waiters.register(ids)
        try:
            while True:
                finished, pending = await self._finished(ids)
                remaining = None if deadline is None else deadline - time.monotonic()
                if not pending or (remaining is not None and remaining <= 0):
                    return finished
                slice_ = self.wait_poll_seconds if remaining is None else min(remaining, self.wait_poll_seconds)
                await waiter.wait(slice_)
                await self._watchdog.maybe_scan()
        finally:
            self._waiters.unregister(waiter)

    async def _finished(self, rollout_ids: list[str]) -> tuple[list[Rollout], bool]:
        """Terminal rollouts among the ids (input order) and whether any known one is still pending."""
        finished: list[Rollout] = []
        pending = False
        async with self._reads() as c:
            for rollout_id in rollout_ids:
                rollout = await c.rollouts.get(rollout_id)
                if rollout is None:
                    continue
                if is_terminal(rollout.status):
                    finished.append(_plain(rollout))
                else:
                    pending = True
        return finished, pending

    # ---- attempts ----

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
        check_sort("attempt", sort_by, sort_order)
        check_pagination(limit, offset)
        async with self._reads() as c:
            page = await c.attempts.query(
                _by_rollout(rollout_id), sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset
            )
        return PaginatedResult[Attempt].model_construct(
            items=[a.model_copy() for a in page.items], limit=limit, offset=offset, total=page.total
        )

    @tracked("attempts")
    @healthcheck_before
    async def get_latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        async with self._reads() as c:
            attempt = await self._latest_attempt(c, rollout_id)
        return attempt.model_copy() if attempt is not None else None

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
        changes: dict[str, Any] = {}
        if not is_unset(status):
            check_attempt_status(status)
            changes["status"] = status
        if not is_unset(worker_id):
            if worker_id is not None and not isinstance(worker_id, str):
                raise ValueError(f"worker_id must be a string or None, got {type(worker_id).__name__}")
            changes["worker_id"] = worker_id
        if not is_unset(last_heartbeat_time):
            if last_heartbeat_time is not None and (
                not isinstance(last_heartbeat_time, (int, float)) or isinstance(last_heartbeat_time, bool)
            ):
                raise ValueError(f"last_heartbeat_time must be a number or None, got {last_heartbeat_time!r}")
            changes["last_heartbeat_time"] = last_heartbeat_time
        if not is_unset(metadata):
            changes["metadata"] = _coerce_metadata(metadata)
        async with self._writes() as c:
            rollout = await self._require_rollout(c, rollout_id)
            attempt = await self._require_attempt(c, rollout_id, attempt_id)
            now = self._now()
            if changes.get("worker_id") is not None and changes["worker_id"] != attempt.worker_id:
                await self._claim_for_worker(c, attempt.model_copy(update={"worker_id": changes["worker_id"]}), now)
            updated = await self._update_attempt(c, rollout, attempt, changes, now)
        return updated.model_copy()

    # ---- spans ----

    @tracked("spans")
    @healthcheck_before
    async def add_span(self, span: Span) -> Optional[Span]:
        span_ = _coerce_span(span)
        async with self._writes() as c:
            stored = await self._insert_spans(c, [span_], self._now())
        return stored[0] if stored else None

    @tracked("spans")
    @healthcheck_before
    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        spans_ = [_coerce_span(s) for s in spans]
        if not spans_:
            return []
        async with self._writes() as c:
            return await self._insert_spans(c, spans_, self._now())

    async def _next_sequence_ids(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        async with self._writes() as c:
            for rollout_id, attempt_id in pairs:
                await self._require_rollout(c, rollout_id)
                await self._require_attempt(c, rollout_id, attempt_id)
            return [await c.span_sequence_ids.inc(rollout_id) for rollout_id, _ in pairs]

    @tracked("spans")
    @healthcheck_before
    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        return (await self._next_sequence_ids([(rollout_id, attempt_id)]))[0]

    @tracked("spans")
    @healthcheck_before
    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        return await self._next_sequence_ids([(r, a) for r, a in rollout_attempt_ids])

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
        check_filter_logic(filter_logic)
        check_sort("span", sort_by, sort_order)
        check_pagination(limit, offset)
        filters: dict[str, Any] = {"_aggregate": filter_logic}
        for field, exact, contains in (
            ("trace_id", trace_id, trace_id_contains),
            ("span_id", span_id, span_id_contains),
            ("parent_id", parent_id, parent_id_contains),
            ("name", name, name_contains),
        ):
            condition: dict[str, Any] = {}
            if exact is not None:
                condition["exact"] = exact
            if contains is not None:
                condition["contains"] = contains
            if condition:
                filters[field] = condition
        async with self._reads() as c:
            await self._check_spans_readable(c, rollout_id)
            must: dict[str, Any] = {"rollout_id": {"exact": rollout_id}}
            if attempt_id == "latest":
                latest = await self._latest_attempt(c, rollout_id)
                if latest is None:
                    return PaginatedResult[Span](items=[], limit=limit, offset=offset, total=0)
                must["attempt_id"] = {"exact": latest.attempt_id}
            elif attempt_id is not None:
                must["attempt_id"] = {"exact": attempt_id}
            filters["_must"] = must
            return await c.spans.query(filters, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)

    # ---- resources ----

    async def _put_resources(self, resources_id: Optional[str], resources: NamedResources) -> ResourcesUpdate:
        validated = validate_named_resources(resources)
        async with self._writes() as c:
            now = self._now()
            existing = await c.resources.get(resources_id) if resources_id is not None else None
            if existing is None:
                update = ResourcesUpdate(
                    resources_id=resources_id or new_resources_id(),
                    create_time=now,
                    update_time=now,
                    version=1,
                    resources=validated,
                )
            else:
                update = existing.model_copy(
                    update={"update_time": now, "version": existing.version + 1, "resources": validated}
                )
            await c.resources.upsert(update)
            await c.store_meta.set(_LATEST_RESOURCES_KEY, update.resources_id)
        return update.model_copy()

    @tracked("resources")
    @healthcheck_before
    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        return await self._put_resources(None, resources)

    @tracked("resources")
    @healthcheck_before
    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        if not isinstance(resources_id, str) or not resources_id:
            raise ValueError(f"resources_id must be a non-empty string, got {resources_id!r}")
        return await self._put_resources(resources_id, resources)

    @tracked("resources")
    @healthcheck_before
    async def get_resources_by_id(self, resources_id: str) -> Optional[ResourcesUpdate]:
        async with self._reads() as c:
            found = await c.resources.get(resources_id)
        return found.model_copy() if found is not None else None

    @tracked("resources")
    @healthcheck_before
    async def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        async with self._reads() as c:
            latest_id = await c.store_meta.get(_LATEST_RESOURCES_KEY)
            found = await c.resources.get(latest_id) if latest_id is not None else None
        return found.model_copy() if found is not None else None

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
        check_sort("resources", sort_by, sort_order)
        check_pagination(limit, offset)
        condition: dict[str, Any] = {}
        if resources_id is not None:
            condition["exact"] = resources_id
        if resources_id_contains is not None:
            condition["contains"] = resources_id_contains
        filters: FilterOptions = {"resources_id": condition} if condition else {}
        async with self._reads() as c:
            page = await c.resources.query(filters, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)
        return PaginatedResult[ResourcesUpdate].model_construct(
            items=[r.model_copy() for r in page.items], limit=limit, offset=offset, total=page.total
        )

    # ---- workers ----

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
        check_filter_logic(filter_logic)
        check_sort("worker", sort_by, sort_order)
        check_pagination(limit, offset)
        filters: dict[str, Any] = {"_aggregate": filter_logic}
        if status_in is not None:
            for value in status_in:
                check_worker_status(value)
            filters["status"] = {"within": list(status_in)}
        if worker_id_contains is not None:
            filters["worker_id"] = {"contains": worker_id_contains}
        async with self._reads() as c:
            page = await c.workers.query(filters, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)
        return PaginatedResult[Worker].model_construct(
            items=[w.model_copy() for w in page.items], limit=limit, offset=offset, total=page.total
        )

    @tracked("workers")
    @healthcheck_before
    async def get_worker_by_id(self, worker_id: str) -> Optional[Worker]:
        async with self._reads() as c:
            found = await c.workers.get(worker_id)
        return found.model_copy() if found is not None else None

    @tracked("workers")
    @healthcheck_before
    async def update_worker(self, worker_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        if not isinstance(worker_id, str) or not worker_id:
            raise ValueError(f"worker_id must be a non-empty string, got {worker_id!r}")
        changes: dict[str, Any] = {}
        if not is_unset(heartbeat_stats):
            changes["heartbeat_stats"] = _coerce_metadata(heartbeat_stats, "heartbeat_stats")
        async with self._writes() as c:
            changes["last_heartbeat_time"] = self._now()
            worker = await self._touch_worker(c, worker_id, **changes)
        return worker.model_copy()

    # ---- statistics ----

    @tracked("store")
    async def statistics(self) -> LightningStoreStatistics:
        async with self._reads() as c:
            return LightningStoreStatistics(
                name=type(self).__name__,
                total_rollouts=await c.rollouts.size(),
                total_attempts=await c.attempts.size(),
                total_spans=await c.spans.size(),
                total_resources=await c.resources.size(),
                total_workers=await c.workers.size(),
                uptime=self._now() - self._started_at,
            )
