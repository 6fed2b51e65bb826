"""The store's read side: pages of rollouts, attempts, spans, resources and workers, and lookups.

Functions over an open `StoreTransaction`, returning models; `SqlLightningStore` validates arguments,
builds the `Where` and runs them in a read transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Optional, TypeVar, Union

from agentlightning.types import AttemptedRollout, PaginatedResult, ResourcesUpdate, Rollout, Span, Worker

from ..utils import is_terminal, unhealthy_attempt_status
from .codec import (
    ATTEMPT_COLUMNS,
    RESOURCES_COLUMNS,
    ROLLOUT_COLUMNS,
    WORKER_COLUMNS,
    attempt_from_row,
    attempted_rollout_from_row,
    prefixed,
    resources_from_row,
    rollout_from_row,
    span_from_row,
    worker_from_row,
)
from .engine import Row
from .query import Where, limit_offset, order_by
from .transaction import LATEST_RESOURCES_KEY, StoreTransaction

__all__ = [
    "rollouts_page",
    "rollout_by_id",
    "rollouts_by_ids",
    "finished_rollouts",
    "attempts_page",
    "spans_page",
    "resources_page",
    "resources_by_id",
    "latest_resources",
    "workers_page",
    "worker_by_id",
    "totals",
    "unhealthy_rollout_ids",
]

T = TypeVar("T")

_ROLLOUT_WITH_LATEST_ATTEMPT = (
    "SELECT "
    + prefixed(ROLLOUT_COLUMNS, "r")
    + ", "
    + prefixed(ATTEMPT_COLUMNS, "a")
    + " FROM {rollouts} r LEFT JOIN {attempts} a ON a.rollout_id = r.rollout_id AND a.sequence_id = r.attempt_count"
)


@dataclass(frozen=True)
class _Listing(Generic[T]):
    """A paged query: its page model, row decoder, SELECT (without WHERE) and matching COUNT."""

    model: type[PaginatedResult[T]]
    decode: Callable[[Row], T]
    select: str
    count: str


def _table_listing(
    model: type[PaginatedResult[T]], decode: Callable[[Row], T], table: str, columns: str
) -> _Listing[T]:
    return _Listing(
        model, decode, "SELECT " + columns + " FROM {" + table + "}", "SELECT COUNT(*) FROM {" + table + "}"
    )


_ROLLOUTS = _Listing(
    PaginatedResult[Union[Rollout, AttemptedRollout]],
    attempted_rollout_from_row,
    _ROLLOUT_WITH_LATEST_ATTEMPT,
    "SELECT COUNT(*) FROM {rollouts} r",
)
_ATTEMPTS = _table_listing(PaginatedResult[Any], attempt_from_row, "attempts", ATTEMPT_COLUMNS)
_SPANS = _table_listing(PaginatedResult[Span], span_from_row, "spans", "data")
_RESOURCES = _table_listing(PaginatedResult[ResourcesUpdate], resources_from_row, "resources", RESOURCES_COLUMNS)
_WORKERS = _table_listing(PaginatedResult[Worker], worker_from_row, "workers", WORKER_COLUMNS)


async def _page(
    st: StoreTransaction, listing: _Listing[T], where: Where, order: str, limit: int, offset: int
) -> PaginatedResult[T]:
    """One page of decoded rows and the total number of matches (counted only when paging hides some)."""
    where_sql, params = where.sql()
    paging, paging_params = limit_offset(limit, offset)
    rows = await st.tx.fetchall(listing.select + where_sql + order + paging, (*params, *paging_params))
    total = len(rows)
    if paging:
        counted = await st.tx.fetchone(listing.count + where_sql, params)
        total = int(counted[0]) if counted is not None else 0
    return listing.model.model_construct(
        items=[listing.decode(row) for row in rows], limit=limit, offset=offset, total=total
    )


async def rollouts_page(
    st: StoreTransaction, where: Where, sort_by: Optional[str], sort_order: str, limit: int, offset: int
) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
    """Rollouts (columns aliased `r.`), each with its latest attempt when it has one."""
    return await _page(st, _ROLLOUTS, where, order_by(sort_by, sort_order, alias="r"), limit, offset)


async def rollout_by_id(st: StoreTransaction, rollout_id: str) -> Optional[Rollout]:
    row = await st.tx.fetchone(_ROLLOUT_WITH_LATEST_ATTEMPT + " WHERE r.rollout_id = ?", (rollout_id,))
    return attempted_rollout_from_row(row) if row is not None else None


async def _rows_of_rollouts(st: StoreTransaction, columns: str, rollout_ids: list[str]) -> list[Row]:
    unique = list(dict.fromkeys(rollout_ids))
    if not unique:
        return []
    return await st.tx.fetchall(
        "SELECT " + columns + " FROM {rollouts} WHERE rollout_id IN (" + ", ".join("?" for _ in unique) + ")", unique
    )


async def rollouts_by_ids(st: StoreTransaction, rollout_ids: list[str]) -> dict[str, Rollout]:
    """Plain rollouts (no attempt) by id; unknown ids are absent."""
    return {row[0]: rollout_from_row(row) for row in await _rows_of_rollouts(st, ROLLOUT_COLUMNS, rollout_ids)}


async def finished_rollouts(st: StoreTransaction, rollout_ids: list[str]) -> tuple[dict[str, Rollout], bool]:
    """Terminal rollouts among the ids, and whether any known one is still pending.

    Waiters poll this often with many ids; only the terminal rows are decoded.
    """
    rows = await _rows_of_rollouts(st, "rollout_id, status", rollout_ids)
    terminal = [row[0] for row in rows if is_terminal(row[1])]
    pending = len(terminal) < len(rows)
    return (await rollouts_by_ids(st, terminal) if terminal else {}), pending


async def attempts_page(
    st: StoreTransaction, where: Where, sort_by: Optional[str], sort_order: str, limit: int, offset: int
) -> PaginatedResult[Any]:
    return await _page(st, _ATTEMPTS, where, order_by(sort_by, sort_order), limit, offset)


async def spans_page(
    st: StoreTransaction,
    rollout_id: str,
    attempt_id: Optional[str],
    where: Where,
    sort_by: Optional[str],
    sort_order: str,
    limit: int,
    offset: int,
) -> PaginatedResult[Span]:
    """Spans of a rollout; `attempt_id` None (all attempts), "latest" or an id; `where` filters fields."""
    scoped = where.required(("rollout_id = ?", [rollout_id]))
    if attempt_id == "latest":
        latest = await st.latest_attempt(rollout_id)
        if latest is None:
            return PaginatedResult[Span](items=[], limit=limit, offset=offset, total=0)
        scoped = scoped.required(("attempt_id = ?", [latest.attempt_id]))
    elif attempt_id is not None:
        scoped = scoped.required(("attempt_id = ?", [attempt_id]))
    return await _page(st, _SPANS, scoped, order_by(sort_by, sort_order), limit, offset)


async def resources_page(
    st: StoreTransaction, where: Where, sort_by: Optional[str], sort_order: str, limit: int, offset: int
) -> PaginatedResult[ResourcesUpdate]:
    return await _page(st, _RESOURCES, where, order_by(sort_by, sort_order), limit, offset)


async def resources_by_id(st: StoreTransaction, resources_id: str) -> Optional[ResourcesUpdate]:
    row = await st.tx.fetchone(
        "SELECT " + RESOURCES_COLUMNS + " FROM {resources} WHERE resources_id = ?", (resources_id,)
    )
    return resources_from_row(row) if row is not None else None


async def latest_resources(st: StoreTransaction) -> Optional[ResourcesUpdate]:
    row = await st.tx.fetchone(
        "SELECT "
        + prefixed(RESOURCES_COLUMNS, "x")
        + " FROM {meta} m JOIN {resources} x ON x.resources_id = m.value WHERE m.key = ?",
        (LATEST_RESOURCES_KEY,),
    )
    return resources_from_row(row) if row is not None else None


async def workers_page(
    st: StoreTransaction, where: Where, sort_by: Optional[str], sort_order: str, limit: int, offset: int
) -> PaginatedResult[Worker]:
    return await _page(st, _WORKERS, where, order_by(sort_by, sort_order), limit, offset)


async def worker_by_id(st: StoreTransaction, worker_id: str) -> Optional[Worker]:
    row = await st.tx.fetchone("SELECT " + WORKER_COLUMNS + " FROM {workers} WHERE worker_id = ?", (worker_id,))
    return worker_from_row(row) if row is not None else None


async def totals(st: StoreTransaction) -> tuple[int, int, int, int, int]:
    """Numbers of rollouts, attempts, spans, resources and workers."""
    row = await st.tx.fetchone(
        "SELECT (SELECT COUNT(*) FROM {rollouts}), (SELECT COUNT(*) FROM {attempts}), (SELECT COUNT(*) FROM {spans}), "
        "(SELECT COUNT(*) FROM {resources}), (SELECT COUNT(*) FROM {workers})"
    )
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4])


async def unhealthy_rollout_ids(st: StoreTransaction, now: float) -> list[str]:
    """Live rollouts (preparing/running, with a timeout or unresponsive limit) whose latest attempt is stale."""
    rows = await st.tx.fetchall(
        "SELECT "
        + prefixed(ROLLOUT_COLUMNS, "r")
        + ", "
        + prefixed(ATTEMPT_COLUMNS, "a")
        + " FROM {rollouts} r JOIN {attempts} a ON a.rollout_id = r.rollout_id AND a.sequence_id = r.attempt_count "
        "WHERE r.status IN ('preparing', 'running') "
        "AND (r.timeout_seconds IS NOT NULL OR r.unresponsive_seconds IS NOT NULL) ORDER BY r.id"
    )
    out: list[str] = []
    for row in rows:
        rollout = rollout_from_row(row)
        if unhealthy_attempt_status(attempt_from_row(row, len(ROLLOUT_COLUMNS.split(","))), rollout.config, now):
            out.append(rollout.rollout_id)
    return out
