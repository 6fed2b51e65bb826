"""The store's state machine as steps inside one SQL transaction.

Each step applies a decision of `store.transitions` (as `collection.steps` does for the collection store, in the
same order of effects), so SQL backends and the in-memory store behave alike. Rows a step changes based on what it
read are read with `{for_update}`: a no-op on SQLite (write transactions are exclusive there) and a row
lock on PostgreSQL (so concurrent processes serialise per rollout instead of losing updates). Locks are
taken rollout -> attempt -> worker to keep deadlocks rare; the engine retries the rare ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from agentlightning.types import Attempt, AttemptedRollout, Rollout, RolloutStatus, Span, Worker

from .. import _arguments as arguments
from .. import transitions
from ..utils import assign_sequence_ids, count_unsequenced_spans, is_queuing
from .codec import (
    ATTEMPT_COLUMNS,
    ROLLOUT_COLUMNS,
    WORKER_COLUMNS,
    attempt_from_row,
    rollout_from_row,
    to_json,
    to_json_or_none,
    worker_from_row,
)
from .engine import SqlTransaction

__all__ = ["RolloutRecord", "StoreTransaction", "LATEST_RESOURCES_KEY"]

LATEST_RESOURCES_KEY = "latest_resources_id"

_ROLLOUT_COLUMN_ENCODERS: dict[str, Any] = {
    "input": to_json,
    "start_time": None,
    "end_time": None,
    "mode": None,
    "resources_id": None,
    "status": None,
    "metadata": to_json_or_none,
}
_ATTEMPT_COLUMN_ENCODERS: dict[str, Any] = {
    "status": None,
    "end_time": None,
    "worker_id": None,
    "last_heartbeat_time": None,
    "metadata": to_json_or_none,
}
_WORKER_COLUMN_ENCODERS: dict[str, Any] = {
    "status": None,
    "heartbeat_stats": to_json_or_none,
    "last_heartbeat_time": None,
    "last_dequeue_time": None,
    "last_busy_time": None,
    "last_idle_time": None,
    "current_rollout_id": None,
    "current_attempt_id": None,
}


def _encode(encoders: dict[str, Any], changes: dict[str, Any]) -> tuple[list[str], list[Any]]:
    columns: list[str] = []
    values: list[Any] = []
    for name, value in changes.items():
        if name not in encoders:
            raise KeyError(f"column {name!r} cannot be updated")
        encoder = encoders[name]
        columns.append(name)
        values.append(encoder(value) if encoder is not None else value)
    return columns, values


@dataclass
class RolloutRecord:
    """A rollout row: the model plus how many attempts it has (the latest has that sequence id)."""

    rollout: Rollout
    attempt_count: int


class StoreTransaction:
    """Domain steps (require, set status, new attempt, spans...) over one open `SqlTransaction`.

    `now` is the time of the whole store call; `finished` collects rollouts that became terminal and
    `queued` says whether one joined the queue, so the store can wake its waiters once the transaction committed.
    """

    def __init__(self, tx: SqlTransaction, now: float) -> None:
        self.tx = tx
        self.now = now
        self.finished: list[str] = []
        self.queued = False

    # ---- rollouts ----

    async def get_rollout(self, rollout_id: str, *, lock: bool = False) -> Optional[RolloutRecord]:
        sql = "SELECT " + ROLLOUT_COLUMNS + ", attempt_count FROM {rollouts} WHERE rollout_id = ?"
        row = await self.tx.fetchone(sql + ("{for_update}" if lock else ""), (rollout_id,))
        if row is None:
            return None
        return RolloutRecord(rollout_from_row(row), row[9])

    async def require_rollout(self, rollout_id: str, *, lock: bool = True) -> RolloutRecord:
        record = await self.get_rollout(rollout_id, lock=lock)
        if record is None:
            raise arguments.rollout_not_found(rollout_id)
        return record

    async def insert_rollouts(self, rollouts: Sequence[Rollout]) -> None:
        """Insert new rollouts; queuing ones join the tail of the queue in the given order."""
        self.queued = self.queued or any(is_queuing(r.status) for r in rollouts)
        columns = ROLLOUT_COLUMNS + ", timeout_seconds, unresponsive_seconds, queue_position"
        await self.tx.executemany(
            "INSERT INTO {rollouts} ("
            + columns
            + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, CASE WHEN ? THEN {next_queue_position} ELSE NULL END)",
            [
                (
                    r.rollout_id,
                    to_json(r.input),
                    r.start_time,
                    r.end_time,
                    r.mode,
                    r.resources_id,
                    r.status,
                    r.config.model_dump_json(),
                    to_json_or_none(r.metadata),
                    r.config.timeout_seconds,
                    r.config.unresponsive_seconds,
                    is_queuing(r.status),
                )
                for r in rollouts
            ],
        )

    async def claim_from_queue(
        self, limit: int, worker_id: Optional[str], run: Optional[str] = None
    ) -> list[AttemptedRollout]:
        """Dequeue up to `limit` rollouts (of `run` only, when given) in FIFO order, each with a new attempt;
        records the worker's dequeue."""
        claimed: list[AttemptedRollout] = []
        of_run = "" if run is None else "AND {run_of_rollout} = ? "
        while len(claimed) < limit:
            # SKIP LOCKED (PostgreSQL): rows another process is claiming right now are not ours to take.
            rows = await self.tx.fetchall(
                "SELECT "
                + ROLLOUT_COLUMNS
                + ", attempt_count FROM {rollouts} WHERE queue_position IS NOT NULL "
                + of_run
                + "ORDER BY queue_position LIMIT ?{skip_locked}",
                (limit - len(claimed),) if run is None else (run, limit - len(claimed)),
            )
            if not rows:
                break
            for row in rows:
                record = RolloutRecord(rollout_from_row(row), row[9])
                if not is_queuing(record.rollout.status):
                    # Unreachable while status and queue stay in step; skipped like a stale in-memory entry.
                    await self.tx.execute(
                        "UPDATE {rollouts} SET queue_position = NULL WHERE rollout_id = ?", (record.rollout.rollout_id,)
                    )
                    continue
                claimed.append(await self.new_attempt(record, worker_id))
        if worker_id is not None:
            await self.touch_worker(worker_id, **transitions.worker_dequeue_changes(bool(claimed), self.now))
        return claimed

    async def set_rollout_status(
        self,
        rollout: Rollout,
        status: RolloutStatus,
        *,
        attempt_count: Optional[int] = None,
        direct: bool = False,
        **changes: Any,
    ) -> Rollout:
        """Apply a status (and other field changes): keep the queue in step, stamp or clear `end_time`.

        `attempt_count` records a new latest attempt in the same statement. `direct`: a move made by
        `update_rollout` or a reviving span (see `transitions.check_transition`).
        """
        transition = transitions.rollout_transition(rollout, status, self.now, changes, direct)
        fields = dict(transition.changes)
        config = fields.pop("config", None)
        columns, values = _encode(_ROLLOUT_COLUMN_ENCODERS, fields)
        if config is not None:
            columns += ["config", "timeout_seconds", "unresponsive_seconds"]
            values += [config.model_dump_json(), config.timeout_seconds, config.unresponsive_seconds]
        if attempt_count is not None:
            columns.append("attempt_count")
            values.append(attempt_count)
        assignments = [f"{column} = ?" for column in columns]
        # The queue holds exactly the queuing-like rollouts; a rollout already queued keeps its place.
        if transition.enqueue:
            assignments.append("queue_position = COALESCE(queue_position, {next_queue_position})")
            self.queued = True
        elif transition.dequeue:
            assignments.append("queue_position = NULL")
        if assignments:
            await self.tx.execute(
                "UPDATE {rollouts} SET " + ", ".join(assignments) + " WHERE rollout_id = ?",
                (*values, rollout.rollout_id),
            )
        if transition.finished:
            self.finished.append(rollout.rollout_id)
        return rollout.model_copy(update=transition.changes) if transition.changes else rollout

    async def resolve_resources_id(self, resources_id: Optional[str]) -> Optional[str]:
        if resources_id is None:
            row = await self.tx.fetchone("SELECT value FROM {meta} WHERE key = ?", (LATEST_RESOURCES_KEY,))
            return row[0] if row is not None else None
        arguments.check_resources_reference(resources_id)  # may name resources added later, as in v0.3
        return resources_id

    async def put_resources(self, resources_id: str, document: str) -> tuple[float, int]:
        """Create (version 1) or replace (version + 1) a resources bundle and make it the latest.

        One upsert statement, so two processes updating the same id never collide on insert.
        Returns the bundle's creation time and new version.
        """
        row = await self.tx.fetchone(
            "INSERT INTO {resources} AS x (resources_id, create_time, update_time, version, resources) "
            "VALUES (?, ?, ?, 1, ?) ON CONFLICT (resources_id) DO UPDATE SET update_time = excluded.update_time, "
            "version = x.version + 1, resources = excluded.resources RETURNING create_time, version",
            (resources_id, self.now, self.now, document),
        )
        assert row is not None
        await self.tx.execute(
            "INSERT INTO {meta} (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (LATEST_RESOURCES_KEY, resources_id),
        )
        return row[0], row[1]

    # ---- attempts ----

    async def latest_attempt(self, rollout_id: str, *, lock: bool = False) -> Optional[Attempt]:
        sql = "SELECT " + ATTEMPT_COLUMNS + " FROM {attempts} WHERE rollout_id = ? ORDER BY sequence_id DESC LIMIT 1"
        row = await self.tx.fetchone(sql + ("{for_update}" if lock else ""), (rollout_id,))
        return attempt_from_row(row) if row is not None else None

    async def get_attempt(self, rollout_id: str, attempt_id: str, *, lock: bool = False) -> Optional[Attempt]:
        sql = "SELECT " + ATTEMPT_COLUMNS + " FROM {attempts} WHERE rollout_id = ? AND attempt_id = ?"
        row = await self.tx.fetchone(sql + ("{for_update}" if lock else ""), (rollout_id, attempt_id))
        return attempt_from_row(row) if row is not None else None

    async def require_attempt(self, rollout_id: str, attempt_id: str, *, lock: bool = True) -> Attempt:
        if attempt_id == "latest":
            attempt = await self.latest_attempt(rollout_id, lock=lock)
            if attempt is None:
                raise arguments.no_attempts_yet(rollout_id)
            return attempt
        attempt = await self.get_attempt(rollout_id, attempt_id, lock=lock)
        if attempt is None:
            raise arguments.attempt_not_found(rollout_id, attempt_id)
        return attempt

    async def write_attempt(self, attempt: Attempt, changes: dict[str, Any]) -> None:
        columns, values = _encode(_ATTEMPT_COLUMN_ENCODERS, changes)
        if columns:
            await self.tx.execute(
                "UPDATE {attempts} SET "
                + ", ".join(f"{c} = ?" for c in columns)
                + " WHERE rollout_id = ? AND attempt_id = ?",
                (*values, attempt.rollout_id, attempt.attempt_id),
            )

    async def new_attempt(self, record: RolloutRecord, worker_id: Optional[str]) -> AttemptedRollout:
        """Create the rollout's next attempt (sequence id = attempts so far + 1); the rollout is `preparing`."""
        transitions.check_transition("rollout", record.rollout.rollout_id, record.rollout.status, "preparing")
        attempt = transitions.next_attempt(record.rollout.rollout_id, record.attempt_count + 1, worker_id, self.now)
        await self.tx.execute(
            "INSERT INTO {attempts} (" + ATTEMPT_COLUMNS + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                attempt.rollout_id,
                attempt.attempt_id,
                attempt.sequence_id,
                attempt.start_time,
                attempt.end_time,
                attempt.status,
                attempt.worker_id,
                attempt.last_heartbeat_time,
                to_json_or_none(attempt.metadata),
            ),
        )
        record.attempt_count = attempt.sequence_id
        rollout = await self.set_rollout_status(record.rollout, "preparing", attempt_count=attempt.sequence_id)
        record.rollout = rollout
        await self.claim_for_worker(attempt)
        return transitions.attempted_rollout(rollout, attempt)

    async def update_attempt(self, record: RolloutRecord, attempt: Attempt, changes: dict[str, Any]) -> Attempt:
        """Change an attempt; a status change updates its worker and, for the latest attempt, the rollout."""
        fields = transitions.stamp_attempt_changes(changes, self.now, attempt)
        updated = attempt.model_copy(update=fields)
        await self.write_attempt(attempt, fields)
        if changes.get("status") is None:
            return updated
        await self.sync_worker_status(updated)
        status = transitions.rollout_status_after_attempt(record.rollout, updated)
        if status is not None and updated.sequence_id >= record.attempt_count:
            record.rollout = await self.set_rollout_status(record.rollout, status)
        return updated

    # ---- workers ----

    async def touch_worker(self, worker_id: str, **changes: Any) -> Worker:
        """Create the worker with these fields, or change just these fields of the existing one."""
        columns, values = _encode(_WORKER_COLUMN_ENCODERS, changes)
        if "status" not in changes:
            # A new worker starts `unknown`; an existing one keeps its status (DO UPDATE skips it).
            insert_columns, insert_values = ["status", *columns], ["unknown", *values]
        else:
            insert_columns, insert_values = columns, values
        update = ", ".join(f"{c} = excluded.{c}" for c in columns) or "worker_id = excluded.worker_id"
        row = await self.tx.fetchone(
            "INSERT INTO {workers} AS w (worker_id, "
            + ", ".join(insert_columns)
            + ") VALUES (?, "
            + ", ".join("?" for _ in insert_columns)
            + ") ON CONFLICT (worker_id) DO UPDATE SET "
            + update
            + " RETURNING "
            + WORKER_COLUMNS,
            (worker_id, *insert_values),
        )
        assert row is not None
        return worker_from_row(row)

    async def heartbeat_current_attempt(self, worker: Worker) -> None:
        """The worker's heartbeat is also one of the live attempt it works on (see `transitions`)."""
        if worker.current_rollout_id is None or worker.current_attempt_id is None:
            return
        await self.tx.execute(
            "UPDATE {attempts} SET last_heartbeat_time = ? WHERE rollout_id = ? AND attempt_id = ? "
            "AND worker_id = ? AND status IN ('preparing', 'running')",
            (self.now, worker.current_rollout_id, worker.current_attempt_id, worker.worker_id),
        )

    async def claim_for_worker(self, attempt: Attempt) -> None:
        if attempt.worker_id is not None:
            await self.touch_worker(attempt.worker_id, **transitions.worker_claim_changes(attempt, self.now))

    async def sync_worker_status(self, attempt: Attempt) -> None:
        """Worker status follows its attempt: finished -> idle, stale -> unknown, otherwise busy."""
        if attempt.worker_id is None:
            return
        if transitions.worker_stays_busy(attempt):
            await self.claim_for_worker(attempt)
            return
        row = await self.tx.fetchone(
            "SELECT current_attempt_id FROM {workers} WHERE worker_id = ?{for_update}", (attempt.worker_id,)
        )
        changes = transitions.worker_release_changes(attempt, self.now, row[0] if row is not None else None)
        if changes is not None:
            await self.touch_worker(attempt.worker_id, **changes)

    # ---- spans ----

    async def insert_spans(self, spans: list[Span]) -> list[Span]:
        """Validate, store new spans, raise sequence floors, and heartbeat attempts; returns the spans stored.

        A span whose `(rollout_id, attempt_id, span_id)` is already stored (or earlier in the batch) is a
        duplicate: skipped, first write wins, still a heartbeat of its attempt. Spans of a stale attempt
        are stored marked `agentlightning.stale_attempt` and heartbeat nothing (no late revival).
        """
        records: dict[str, RolloutRecord] = {}
        attempts: dict[tuple[str, str], Attempt] = {}
        # Validate everything first so a bad span in a batch writes nothing; lock rollouts before attempts.
        for rollout_id in sorted({span.rollout_id for span in spans}):
            record = await self.get_rollout(rollout_id, lock=True)
            if record is None:
                raise arguments.span_rollout_not_found(next(s for s in spans if s.rollout_id == rollout_id))
            records[rollout_id] = record
        for key in sorted({(span.rollout_id, span.attempt_id) for span in spans}):
            attempt = await self.get_attempt(*key, lock=True)
            if attempt is None:
                raise arguments.span_attempt_not_found(next(s for s in spans if (s.rollout_id, s.attempt_id) == key))
            attempts[key] = attempt
        stale = {
            key[1]
            for key, attempt in attempts.items()
            if not transitions.attempt_revived_by_span(attempt, records[key[0]].rollout, records[key[0]].attempt_count)
            and transitions.stale_attempt_reason(attempt, records[key[0]].attempt_count) is not None
        }
        if stale:
            spans = [transitions.mark_stale_span(s) if s.attempt_id in stale else s for s in spans]
        floors = transitions.sequence_floors(spans)
        if floors:
            await self.tx.executemany(
                "INSERT INTO {span_sequences} AS s (rollout_id, last_value) VALUES (?, ?) ON CONFLICT (rollout_id) "
                "DO UPDATE SET last_value = {greatest}(s.last_value, excluded.last_value)",
                sorted(floors.items()),
            )
        spans = await self.drop_duplicate_spans(spans)
        spans = await self.allocate_sequence_ids(spans)
        if spans:
            await self.insert_span_rows(spans)
        for key in sorted(attempts):
            if key[1] not in stale:  # a stale attempt's spans never move it or its rollout
                await self.heartbeat_from_span(records[key[0]], attempts[key])
        return spans

    async def insert_span_rows(self, spans: list[Span]) -> None:
        await self.tx.executemany(
            "INSERT INTO {spans} (rollout_id, attempt_id, sequence_id, trace_id, span_id, parent_id, name, "
            "start_time, end_time, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (rollout_id, attempt_id, span_id) DO NOTHING",
            [
                (
                    s.rollout_id,
                    s.attempt_id,
                    s.sequence_id,
                    s.trace_id,
                    s.span_id,
                    s.parent_id,
                    s.name,
                    s.start_time,
                    s.end_time,
                    s.model_dump_json(),
                )
                for s in spans
            ],
        )

    async def drop_duplicate_spans(self, spans: list[Span]) -> list[Span]:
        """The spans whose key is neither stored yet nor repeated earlier in the batch."""
        by_attempt: dict[tuple[str, str], list[str]] = {}
        for span in spans:
            by_attempt.setdefault((span.rollout_id, span.attempt_id), []).append(span.span_id)
        seen: set[tuple[str, str, str]] = set()
        for (rollout_id, attempt_id), span_ids in by_attempt.items():
            unique = sorted(set(span_ids))
            for start in range(0, len(unique), 500):  # stay far below SQLite's bound-parameter limit
                chunk = unique[start : start + 500]
                rows = await self.tx.fetchall(
                    "SELECT span_id FROM {spans} WHERE rollout_id = ? AND attempt_id = ? AND span_id IN ("
                    + ", ".join("?" * len(chunk))
                    + ")",
                    (rollout_id, attempt_id, *chunk),
                )
                seen.update((rollout_id, attempt_id, row[0]) for row in rows)
        fresh: list[Span] = []
        for span in spans:
            key = (span.rollout_id, span.attempt_id, span.span_id)
            if key not in seen:
                seen.add(key)
                fresh.append(span)
        return fresh

    async def allocate_sequence_ids(self, spans: list[Span]) -> list[Span]:
        """Give spans without a sequence id (negative) the next ids of their rollout, in batch order."""
        missing = count_unsequenced_spans(spans)
        if not missing:
            return spans
        first_ids: dict[str, int] = {}
        for rollout_id in sorted(missing):
            count = missing[rollout_id]
            row = await self.tx.fetchone(
                "INSERT INTO {span_sequences} AS s (rollout_id, last_value) VALUES (?, ?) ON CONFLICT (rollout_id) "
                "DO UPDATE SET last_value = s.last_value + excluded.last_value RETURNING last_value",
                (rollout_id, count),
            )
            assert row is not None
            first_ids[rollout_id] = int(row[0]) - count + 1
        return assign_sequence_ids(spans, first_ids)

    async def heartbeat_from_span(self, record: RolloutRecord, attempt: Attempt) -> None:
        """A span is a heartbeat; the first one (or one after going unresponsive) means `running`."""
        changes = transitions.span_heartbeat_changes(attempt, self.now)
        await self.write_attempt(attempt, changes)
        if "status" not in changes:
            return
        running = attempt.model_copy(update=changes)
        await self.sync_worker_status(running)
        revived = attempt.status == "unresponsive"  # only a revivable one gets here (others are stale)
        status = transitions.rollout_status_after_span(record.rollout, revived)
        if status is not None and running.sequence_id >= record.attempt_count:
            record.rollout = await self.set_rollout_status(record.rollout, status, direct=revived)

    async def next_span_sequence_ids(self, rollout_ids: Sequence[str]) -> list[int]:
        out: list[int] = []
        for rollout_id in rollout_ids:
            row = await self.tx.fetchone(
                "INSERT INTO {span_sequences} AS s (rollout_id, last_value) VALUES (?, 1) ON CONFLICT (rollout_id) "
                "DO UPDATE SET last_value = s.last_value + 1 RETURNING last_value",
                (rollout_id,),
            )
            assert row is not None
            out.append(row[0])
        return out
