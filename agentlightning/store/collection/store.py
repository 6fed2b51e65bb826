"""`CollectionBasedLightningStore`: the store contract written once against `LightningCollections`.

Each public call checks its arguments (`store._arguments`), opens one atomic block and runs the state
machine's steps (`collection.steps`, deciding with `store.transitions`): which calls create attempts, how
the queue follows rollout status, how spans count as heartbeats, when the watchdog marks attempts stale.
Calls that only check arguments and delegate (enqueue, dequeue, waits, resources, the updates and queries) are
`BackendLightningStore`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Optional, TypeVar, Union

from agentlightning.types import (
    Attempt,
    AttemptedRollout,
    FilterOptions,
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
from ..base import UNSET, FilterLogic, LightningStoreStatistics, is_unset
from ..tracking import tracked
from ..utils import Clock, copy_model, is_queuing, is_terminal, new_resources_id, run_of
from ..watchdog import healthcheck_before
from .base import LightningCollections
from .steps import LATEST_RESOURCES_KEY, CollectionStoreSteps, by_rollout, plain

__all__ = ["CollectionBasedLightningStore", "T_Collections"]

T_Collections = TypeVar("T_Collections", bound=LightningCollections)


class CollectionBasedLightningStore(CollectionStoreSteps, Generic[T_Collections]):
    """The full store contract on top of any `LightningCollections` backend.

    Generic over the collections type, so `CollectionBasedLightningStore[InMemoryLightningCollections]`
    types `store.collections` precisely.

    Args:
        collections: where the data lives.
        read_snapshot: make multi-step reads (e.g. rollouts plus their latest attempts) one snapshot.
        tracker: optional metrics backend; every public method reports `agl.<group>.total/duration`.
        scan_debounce_seconds: minimum time between watchdog scans (0 = scan before every call).
        clock: time source in seconds (tests inject a fake one); defaults to `time.time`.
    """

    def __init__(
        self,
        collections: T_Collections,
        *,
        read_snapshot: bool = False,
        tracker: Any = None,
        scan_debounce_seconds: float = 10.0,
        clock: Optional[Clock] = None,
    ) -> None:
        self.collections: T_Collections = collections
        self._read_snapshot = read_snapshot
        self._start_machinery(clock=clock, tracker=tracker, scan_debounce_seconds=scan_debounce_seconds)

    # ---- rollouts and the queue ----

    async def _start_now(self, draft: arguments.RolloutDraft, worker_id: Optional[str]) -> AttemptedRollout:
        async with self._writes() as c:
            now = self._now()
            rollout = draft.build("preparing", await self._resolve_resources_id(c, draft.resources_id), now)
            await c.rollouts.insert(rollout)
            return await self._new_attempt(c, rollout, worker_id, now)

    async def _enqueue_many(self, drafts: list[arguments.RolloutDraft]) -> list[Rollout]:
        async with self._writes() as c:
            now = self._now()
            rollouts = [
                draft.build("queuing", await self._resolve_resources_id(c, draft.resources_id), now) for draft in drafts
            ]
            for rollout in rollouts:
                await c.rollouts.insert(rollout)
            await c.rollout_queue.enqueue([r.rollout_id for r in rollouts])
            self._queued = True
            return [plain(r) for r in rollouts]

    async def _dequeue(self, limit: int, worker_id: Optional[str], run: Optional[str] = None) -> list[AttemptedRollout]:
        async with self._writes() as c:
            now = self._now()
            # A worker that claims something records its dequeue with the claim: one worker write, not two.
            dequeued = transitions.worker_dequeue_changes(True, now) if worker_id is not None else {}
            claimed: list[AttemptedRollout] = []
            for rollout in await self._take_queued(c, limit, run):
                claimed.append(await self._new_attempt(c, rollout, worker_id, now, **dequeued))
            if worker_id is not None and not claimed:
                await self._touch_worker(c, worker_id, **transitions.worker_dequeue_changes(False, now))
            return claimed

    async def _take_queued(self, c: LightningCollections, limit: int, run: Optional[str]) -> list[Rollout]:
        """Remove up to `limit` queuing rollouts from the queue in FIFO order (only those of `run`, when given)."""
        taken: list[Rollout] = []
        if run is None:
            while len(taken) < limit:
                ids = await c.rollout_queue.dequeue(1)
                if not ids:
                    break
                rollout = await c.rollouts.get(ids[0])
                if rollout is not None and is_queuing(rollout.status):  # else stale: it moved on while queued
                    taken.append(rollout)
            return taken
        for rollout_id in await c.rollout_queue.peek(await c.rollout_queue.size()):
            if len(taken) >= limit:
                break
            rollout = await c.rollouts.get(rollout_id)
            if rollout is not None and is_queuing(rollout.status) and run_of(rollout) != run:
                continue  # another run's: it keeps its place
            await c.rollout_queue.remove(rollout_id)
            if rollout is not None and is_queuing(rollout.status):
                taken.append(rollout)
        return taken

    @tracked("attempts")
    @healthcheck_before
    async def start_attempt(self, rollout_id: str, worker_id: Optional[str] = None) -> AttemptedRollout:
        arguments.check_worker_id(worker_id)
        async with self._writes() as c:
            rollout = await self._require_rollout(c, rollout_id)
            return await self._new_attempt(c, rollout, worker_id, self._now())

    async def _rollouts_page(
        self,
        page: arguments.Page,
        filter_logic: FilterLogic,
        statuses: Optional[list[str]],
        ids: Optional[list[str]],
        id_contains: Optional[str],
    ) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
        filters: dict[str, Any] = {"_aggregate": filter_logic}
        if statuses is not None:
            filters["status"] = {"within": statuses}
        if ids is not None:
            filters["rollout_id"] = {"within": ids}
        if id_contains is not None:
            filters["rollout_id"] = {**filters.get("rollout_id", {}), "contains": id_contains}
        async with self._reads() as c:
            found = await c.rollouts.query(filters, **_sorting(page))
            items = await self._with_latest_attempts(c, found.items)
        return PaginatedResult[Union[Rollout, AttemptedRollout]].model_construct(
            items=items, limit=page.limit, offset=page.offset, total=found.total
        )

    @tracked("rollouts")
    @healthcheck_before
    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        async with self._reads() as c:
            rollout = await c.rollouts.get(rollout_id)
            if rollout is None:
                return None
            attempt = await self._latest_attempt(c, rollout_id)
        return transitions.attempted_rollout(rollout, attempt) if attempt is not None else plain(rollout)

    async def _apply_rollout_update(self, rollout_id: str, changes: dict[str, Any], resources_id: Any) -> Rollout:
        async with self._writes() as c:
            rollout = await self._require_rollout(c, rollout_id)
            if not is_unset(resources_id):
                changes["resources_id"] = (
                    None if resources_id is None else await self._resolve_resources_id(c, resources_id)
                )
            new_status = changes.pop("status", rollout.status)
            updated = await self._set_rollout_status(c, rollout, new_status, self._now(), direct=True, **changes)
        return plain(updated)

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
                    finished.append(plain(rollout))
                else:
                    pending = True
        return finished, pending

    # ---- attempts ----

    async def _attempts_page(self, page: arguments.Page, rollout_id: str) -> PaginatedResult[Attempt]:
        async with self._reads() as c:
            found = await c.attempts.query(
                by_rollout(rollout_id),
                sort_by=page.sort_by,
                sort_order=page.sort_order,
                limit=page.limit,
                offset=page.offset,
            )
        return PaginatedResult[Attempt].model_construct(
            items=[a.model_copy() for a in found.items], limit=page.limit, offset=page.offset, total=found.total
        )

    @tracked("attempts")
    @healthcheck_before
    async def get_latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        async with self._reads() as c:
            attempt = await self._latest_attempt(c, rollout_id)
        return attempt.model_copy() if attempt is not None else None

    async def _apply_attempt_update(self, rollout_id: str, attempt_id: str, changes: dict[str, Any]) -> Attempt:
        async with self._writes() as c:
            rollout = await self._require_rollout(c, rollout_id)
            attempt = await self._require_attempt(c, rollout_id, attempt_id)
            transitions.check_attempt_update(attempt, await self._attempt_count(c, rollout_id), changes)
            now = self._now()
            reassigned = transitions.worker_reassignment(attempt, changes)
            if reassigned is not None:
                await self._claim_for_worker(c, reassigned, now)
            updated = await self._update_attempt(c, rollout, attempt, changes, now)
        return copy_model(updated)

    # ---- spans ----

    @tracked("spans")
    @healthcheck_before
    async def add_span(self, span: Span) -> Optional[Span]:
        span_ = arguments.coerce_span(span)
        async with self._writes() as c:
            stored = await self._insert_spans(c, [span_], self._now())
        return stored[0] if stored else None

    @tracked("spans")
    @healthcheck_before
    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        spans_ = arguments.coerce_spans(spans)
        if not spans_:
            return []
        async with self._writes() as c:
            return await self._insert_spans(c, spans_, self._now())

    async def _next_sequence_ids(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        async with self._writes() as c:
            for rollout_id, _ in pairs:  # ids count per rollout: any attempt id is taken, as in v0.3
                await self._require_rollout(c, rollout_id)
            return [await c.span_sequence_ids.inc(rollout_id) for rollout_id, _ in pairs]

    async def _spans_page(
        self,
        page: arguments.Page,
        filter_logic: FilterLogic,
        rollout_id: str,
        attempt_id: Optional[str],
        fields: arguments.SpanFieldFilters,
    ) -> PaginatedResult[Span]:
        filters: dict[str, Any] = {"_aggregate": filter_logic}
        for field, exact, contains in fields:
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
                    return PaginatedResult[Span](items=[], limit=page.limit, offset=page.offset, total=0)
                must["attempt_id"] = {"exact": latest.attempt_id}
            elif attempt_id is not None:
                must["attempt_id"] = {"exact": attempt_id}
            filters["_must"] = must
            return await c.spans.query(filters, **_sorting(page))

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
            await c.store_meta.set(LATEST_RESOURCES_KEY, update.resources_id)
        return update.model_copy()

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
            latest_id = await c.store_meta.get(LATEST_RESOURCES_KEY)
            found = await c.resources.get(latest_id) if latest_id is not None else None
        return found.model_copy() if found is not None else None

    async def _resources_page(
        self, page: arguments.Page, resources_id: Optional[str], id_contains: Optional[str]
    ) -> PaginatedResult[ResourcesUpdate]:
        condition: dict[str, Any] = {}
        if resources_id is not None:
            condition["exact"] = resources_id
        if id_contains is not None:
            condition["contains"] = id_contains
        filters: FilterOptions = {"resources_id": condition} if condition else {}
        async with self._reads() as c:
            found = await c.resources.query(filters, **_sorting(page))
        return PaginatedResult[ResourcesUpdate].model_construct(
            items=[r.model_copy() for r in found.items], limit=page.limit, offset=page.offset, total=found.total
        )

    # ---- workers ----

    async def _workers_page(
        self, page: arguments.Page, filter_logic: FilterLogic, statuses: Optional[list[str]], id_contains: Optional[str]
    ) -> PaginatedResult[Worker]:
        filters: dict[str, Any] = {"_aggregate": filter_logic}
        if statuses is not None:
            filters["status"] = {"within": statuses}
        if id_contains is not None:
            filters["worker_id"] = {"contains": id_contains}
        async with self._reads() as c:
            found = await c.workers.query(filters, **_sorting(page))
        return PaginatedResult[Worker].model_construct(
            items=[w.model_copy() for w in found.items], limit=page.limit, offset=page.offset, total=found.total
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
        changes = arguments.worker_changes(worker_id, heartbeat_stats)
        async with self._writes() as c:
            now = changes["last_heartbeat_time"] = self._now()
            worker = await self._touch_worker(c, worker_id, **changes)
            await self._heartbeat_current_attempt(c, worker, now)
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


def _sorting(page: arguments.Page) -> dict[str, Any]:
    """A collection query's sorting and paging arguments."""
    return {"sort_by": page.sort_by, "sort_order": page.sort_order, "limit": page.limit, "offset": page.offset}
