"""The state machine applied to `LightningCollections`: the steps a store call takes inside one atomic block.

The decisions come from `agentlightning.store.transitions`; these steps read what a decision needs and
write its outcome (rows, queue, waiters). `CollectionBasedLightningStore` adds the public calls on top;
subclasses may refine the span hooks (`_store_spans`, `_check_spans_readable`).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Optional, Union

from agentlightning.types import Attempt, AttemptedRollout, FilterOptions, Rollout, RolloutStatus, Span, Worker

from .. import _arguments as arguments
from .. import transitions
from .._backend import BackendLightningStore
from ..utils import assign_sequence_ids, copy_model, count_unsequenced_spans, unhealthy_attempt_status
from .base import LightningCollections

__all__ = ["CollectionStoreSteps", "LATEST_RESOURCES_KEY", "by_rollout", "plain", "span_key"]

LATEST_RESOURCES_KEY = "latest_resources_id"


def plain(rollout: Rollout) -> Rollout:
    return copy_model(rollout)


def span_key(span: Span) -> tuple[str, str, str]:
    """What identifies a stored span: a second span with the same key is a duplicate."""
    return (span.rollout_id, span.attempt_id, span.span_id)


def by_rollout(rollout_id: str) -> FilterOptions:
    return {"_must": {"rollout_id": {"exact": rollout_id}}}


class _WriteBlock(AbstractAsyncContextManager[LightningCollections]):
    """A `rw` atomic block that, once it committed, wakes waiting dequeues if a step (re)queued a rollout.

    A plain class rather than an `asynccontextmanager`: every write call opens one, so it stays cheap.
    """

    __slots__ = ("_store", "_inner")

    def __init__(self, store: CollectionStoreSteps) -> None:
        self._store = store
        self._inner = store.collections.atomic(mode="rw")

    async def __aenter__(self) -> LightningCollections:
        return await self._inner.__aenter__()

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> Optional[bool]:
        suppressed = await self._inner.__aexit__(exc_type, exc, traceback)
        store = self._store
        if (exc_type is None or suppressed) and store._queued:
            store._queued = False
            store._queue_waiters.notify()
        return suppressed


class CollectionStoreSteps(BackendLightningStore):
    """Steps over an open atomic block `c`; each takes the call's time `now` where it stamps one."""

    collections: LightningCollections
    _read_snapshot: bool
    # Set by a step that (re)queued a rollout; the write block wakes waiting dequeues once it committed.
    _queued: bool = False

    def _now(self) -> float:
        return self._clock()

    def _reads(self) -> Any:
        return self.collections.atomic(mode="r", snapshot=self._read_snapshot)

    def _writes(self) -> AbstractAsyncContextManager[LightningCollections]:
        return _WriteBlock(self)

    # ---- lookups ----

    async def _require_rollout(self, c: LightningCollections, rollout_id: str) -> Rollout:
        rollout = await c.rollouts.get(rollout_id)
        if rollout is None:
            raise arguments.rollout_not_found(rollout_id)
        return rollout

    async def _latest_attempt(self, c: LightningCollections, rollout_id: str) -> Optional[Attempt]:
        page = await c.attempts.query(by_rollout(rollout_id), sort_by="sequence_id", sort_order="desc", limit=1)
        return page.items[0] if page.items else None

    async def _require_attempt(self, c: LightningCollections, rollout_id: str, attempt_id: str) -> Attempt:
        if attempt_id == "latest":
            attempt = await self._latest_attempt(c, rollout_id)
            if attempt is None:
                raise arguments.no_attempts_yet(rollout_id)
            return attempt
        attempt = await c.attempts.get(attempt_id)
        if attempt is None or attempt.rollout_id != rollout_id:
            raise arguments.attempt_not_found(rollout_id, attempt_id)
        return attempt

    async def _attempt_count(self, c: LightningCollections, rollout_id: str) -> int:
        """How many attempts the rollout has: the sequence id of its latest one."""
        return await c.attempts.count_where("rollout_id", rollout_id)

    async def _is_latest(self, c: LightningCollections, attempt: Attempt) -> bool:
        return attempt.sequence_id >= await self._attempt_count(c, attempt.rollout_id)

    async def _resolve_resources_id(self, c: LightningCollections, resources_id: Optional[str]) -> Optional[str]:
        if resources_id is None:
            return await c.store_meta.get(LATEST_RESOURCES_KEY)
        arguments.check_resources_reference(resources_id)  # may name resources added later, as in v0.3
        return resources_id

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
            out.append(transitions.attempted_rollout(rollout, attempt) if attempt is not None else plain(rollout))
        return out

    # ---- rollouts ----

    async def _set_rollout_status(
        self,
        c: LightningCollections,
        rollout: Rollout,
        status: RolloutStatus,
        now: float,
        *,
        direct: bool = False,
        **changes: Any,
    ) -> Rollout:
        """Apply a status (and other field changes), keeping the queue and the waiters in step.

        `direct`: a move made by `update_rollout` or a reviving span (see `transitions.check_transition`).
        """
        transition = transitions.rollout_transition(rollout, status, now, changes, direct)
        updated = copy_model(rollout, transition.changes) if transition.changes else rollout
        await c.rollouts.update(updated)
        if transition.enqueue:
            await c.rollout_queue.enqueue([rollout.rollout_id])
            self._queued = True
        elif transition.dequeue:
            await c.rollout_queue.remove(rollout.rollout_id)
        if transition.finished:
            self._waiters.notify(rollout.rollout_id)
        return updated

    # ---- attempts and workers ----

    async def _touch_worker(self, c: LightningCollections, worker_id: str, **changes: Any) -> Worker:
        """Create the worker with these fields, or change just these fields of the existing one."""
        worker = await c.workers.get(worker_id)
        if worker is None:
            worker = Worker(worker_id=worker_id, **changes)
        elif changes:
            worker = copy_model(worker, changes)
        await c.workers.upsert(worker)
        return worker

    async def _heartbeat_current_attempt(self, c: LightningCollections, worker: Worker, now: float) -> None:
        """The worker's heartbeat is also one of the live attempt it works on (see `transitions`)."""
        if worker.current_attempt_id is None:
            return
        attempt = await c.attempts.get(worker.current_attempt_id)
        if attempt is None:
            return
        changes = transitions.worker_heartbeat_attempt_changes(attempt, worker.worker_id, now)
        if changes is not None:
            await c.attempts.update(copy_model(attempt, changes))

    async def _claim_for_worker(self, c: LightningCollections, attempt: Attempt, now: float, **extra: Any) -> None:
        """Make the attempt's worker busy with it; `extra` worker fields are written in the same change."""
        if attempt.worker_id is not None:
            await self._touch_worker(c, attempt.worker_id, **transitions.worker_claim_changes(attempt, now), **extra)

    async def _sync_worker_status(self, c: LightningCollections, attempt: Attempt, now: float) -> None:
        """Worker status follows its attempt: finished -> idle, stale -> unknown, otherwise busy."""
        if attempt.worker_id is None:
            return
        if transitions.worker_stays_busy(attempt):
            await self._claim_for_worker(c, attempt, now)
            return
        worker = await c.workers.get(attempt.worker_id)
        changes = transitions.worker_release_changes(
            attempt, now, worker.current_attempt_id if worker is not None else None
        )
        if changes is not None:
            await self._touch_worker(c, attempt.worker_id, **changes)

    async def _new_attempt(
        self, c: LightningCollections, rollout: Rollout, worker_id: Optional[str], now: float, **worker_changes: Any
    ) -> AttemptedRollout:
        """Start the rollout's next attempt; `worker_changes` are written to its worker with the claim."""
        transitions.check_transition("rollout", rollout.rollout_id, rollout.status, "preparing")
        count = await self._attempt_count(c, rollout.rollout_id)
        attempt = transitions.next_attempt(rollout.rollout_id, count + 1, worker_id, now)
        await c.attempts.insert(attempt)
        rollout = await self._set_rollout_status(c, rollout, "preparing", now)
        await self._claim_for_worker(c, attempt, now, **worker_changes)
        return transitions.attempted_rollout(rollout, attempt)

    async def _update_attempt(
        self, c: LightningCollections, rollout: Rollout, attempt: Attempt, changes: dict[str, Any], now: float
    ) -> Attempt:
        """Change an attempt; a status change updates its worker and, for the latest attempt, the rollout."""
        updated = copy_model(attempt, transitions.stamp_attempt_changes(changes, now, attempt))
        await c.attempts.update(updated)
        if changes.get("status") is None:
            return updated
        await self._sync_worker_status(c, updated, now)
        status = transitions.rollout_status_after_attempt(rollout, updated)
        if status is not None and await self._is_latest(c, updated):
            await self._set_rollout_status(c, rollout, status, now)
        return updated

    # ---- spans: the hooks a backend may refine (memory accounting, eviction) ----

    async def _store_spans(self, c: LightningCollections, spans: list[Span]) -> list[Span]:
        """Persist validated spans; returns those actually stored.

        A span whose `(rollout_id, attempt_id, span_id)` is already stored is a duplicate: it is skipped
        (the first write wins) and left out of the result, so `add_span` returns None for it.
        """
        stored: list[Span] = []
        for span in spans:
            if await c.spans.get(span_key(span)) is None:
                await c.spans.insert(span)
                stored.append(span)
        return stored

    async def _check_spans_readable(self, c: LightningCollections, rollout_id: str) -> None:
        """Raise when this rollout's spans can no longer be served (e.g. evicted)."""

    async def _insert_spans(self, c: LightningCollections, spans: list[Span], now: float) -> list[Span]:
        # Validate everything first so a bad span in a batch writes nothing.
        rollouts: dict[str, Rollout] = {}
        attempts: dict[str, Attempt] = {}
        for span in spans:
            if span.rollout_id not in rollouts:
                found = await c.rollouts.get(span.rollout_id)
                if found is None:
                    raise arguments.span_rollout_not_found(span)
                rollouts[span.rollout_id] = found
            if span.attempt_id not in attempts:
                attempt = await c.attempts.get(span.attempt_id)
                if attempt is None or attempt.rollout_id != span.rollout_id:
                    raise arguments.span_attempt_not_found(span)
                attempts[span.attempt_id] = attempt
        stale: set[str] = set()
        for attempt in attempts.values():
            latest = await self._attempt_count(c, attempt.rollout_id)
            if transitions.attempt_revived_by_span(attempt, rollouts[attempt.rollout_id], latest):
                continue
            if transitions.stale_attempt_reason(attempt, latest) is not None:
                stale.add(attempt.attempt_id)
        if stale:
            spans = [transitions.mark_stale_span(s) if s.attempt_id in stale else s for s in spans]
        for rollout_id, floor in transitions.sequence_floors(spans).items():
            await c.span_sequence_ids.chmax(rollout_id, floor)
        spans = await self._allocate_sequence_ids(c, spans)
        stored = await self._store_spans(c, spans)
        for attempt in attempts.values():
            if attempt.attempt_id not in stale:  # a stale attempt's spans never move it or its rollout
                await self._heartbeat_from_span(c, rollouts[attempt.rollout_id], attempt, now)
        return stored

    async def _allocate_sequence_ids(self, c: LightningCollections, spans: list[Span]) -> list[Span]:
        """Give spans without a sequence id (negative) the next ids of their rollout, in batch order."""
        missing = count_unsequenced_spans(spans)
        if not missing:
            return spans
        first_ids = {r: await c.span_sequence_ids.inc(r, n) - n + 1 for r, n in missing.items()}
        return assign_sequence_ids(spans, first_ids)

    async def _heartbeat_from_span(
        self, c: LightningCollections, rollout: Rollout, attempt: Attempt, now: float
    ) -> None:
        changes = transitions.span_heartbeat_changes(attempt, now)
        updated = copy_model(attempt, changes)
        await c.attempts.update(updated)
        if "status" not in changes:
            return
        await self._sync_worker_status(c, updated, now)
        revived = attempt.status == "unresponsive"  # only a revivable one gets here (others are stale)
        status = transitions.rollout_status_after_span(rollout, revived)
        if status is not None and await self._is_latest(c, updated):
            await self._set_rollout_status(c, rollout, status, now, direct=revived)

    # ---- the watchdog ----

    async def _scan_unhealthy(self, now: float) -> None:
        """Mark latest attempts of live rollouts that exceeded their timeout / went silent."""
        async with self._writes() as c:
            live = await c.rollouts.query({"status": {"within": list(transitions.LIVE_ROLLOUT_STATUSES)}})
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
