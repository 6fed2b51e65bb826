"""The store's read side: pages of rollouts, attempts, spans, resources and workers, and lookups.

Functions over an open `StoreTransaction`, returning models; `SqlLightningStore` validates arguments,
builds the `Where` and runs them in a read transaction.
"""

from __future__ import annotations

from typing import Any, Optional, Union

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

_ROLLOUT_WITH_LATEST_ATTEMPT = (
    "SELECT "
    + prefixed(ROLLOUT_COLUMNS, "r")
    + ", "
    + prefixed(ATTEMPT_COLUMNS, "a")
    + " FROM {rollouts} r LEFT JOIN {attempts} a ON a.rollout_id = r.rollout_id AND a.sequence_id = r.attempt_count"
)


async def _page(
    st: StoreTransaction,
    select: str,
    count: str,
    where: Where,
    order: str,
    limit: int,
    offset: int,
) -> tuple[list[Row], int]:
    """Rows of one page and the total number of matches (counted only when paging hides some)."""
    where_sql, params = where.sql()
    paging, paging_params = limit_offset(limit, offset)
    rows = await st.tx.fetchall(select + where_sql + order + paging, (*params, *paging_params))
    if not paging:
        return rows, len(rows)
    total = await st.tx.fetchone(count + where_sql, params)
    return rows, int(total[0]) if total is not None else 0


async def rollouts_page(
    st: StoreTransaction, where: Where, sort_by: Optional[str], sort_order: str, limit: int, offset: int
) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
    """Rollouts (columns aliased `r.`), each with its latest attempt when it has one."""
    rows, total = await _page(
        st,
        _ROLLOUT_WITH_LATEST_ATTEMPT,
        "SELECT COUNT(*) FROM {rollouts} r",
        where,
        order_by(sort_by, sort_order, alias="r"),
        limit,
        offset,
    )
    return PaginatedResult[Union[Rollout, AttemptedRollout]].model_construct(
        items=[attempted_rollout_from_row(row) for row in rows], limit=limit, offset=offset, total=total
    )


async def rollout_by_id(st: StoreTransaction, rollout_id: str) -> Optional[Rollout]:
    row = await st.tx.fetchone(_ROLLOUT_WITH_LATEST_ATTEMPT + " WHERE r.rollout_id = ?", (rollout_id,))
    return attempted_rollout_from_row(row) if row is not None else None


async def rollouts_by_ids(st: StoreTransaction, rollout_ids: list[str]) -> dict[str, Rollout]:
    """Plain rollouts (no attempt) by id; unknown ids are absent."""
    unique = list(dict.fromkeys(rollout_ids))
    if not unique:
        return {}
    rows = await st.tx.fetchall(
        "SELECT " + ROLLOUT_COLUMNS + " FROM {rollouts} WHERE rollout_id IN (" + ", ".join("?" for _ in unique) + ")",
        unique,
    )
    return {row[0]: rollout_from_row(row) for row in rows}


async def finished_rollouts(st: StoreTransaction, rollout_ids: list[str]) -> tuple[dict[str, Rollout], bool]:
    """Terminal rollouts among the ids, and whether any known one is still pending.

    Waiters poll this often with many ids; only the terminal rows are decoded.
    """
    unique = list(dict.fromkeys(rollout_ids))
    if not unique:
        return {}, False
    rows = await st.tx.fetchall(
        "SELECT rollout_id, status FROM {rollouts} WHERE rollout_id IN (" + ", ".join("?" for _ in unique) + ")",
        unique,
    )
    terminal = [row[0] for row in rows if is_terminal(row[1])]
    pending = len(terminal) < len(rows)
    return (await rollouts_by_ids(st, terminal) if terminal else {}), pending


async def attempts_page(
    st: StoreTransaction, where: Where, sort_by: Optional[str], sort_order: str, limit: int, offset: int
) -> PaginatedResult[Any]:
    rows, total = await _page(
        st,
        "SELECT " + ATTEMPT_COLUMNS + " FROM {attempts}",
        "SELECT COUNT(*) FROM {attempts}",
        where,
        order_by(sort_by, sort_order),
        limit,
        offset,
    )
    return PaginatedResult[Any].model_construct(
        items=[attempt_from_row(row) for row in rows], limit=limit, offset=offset, total=total
    )


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
    rows, total = await _page(
        st,
        "SELECT data FROM {spans}",
        "SELECT COUNT(*) FROM {spans}",
        scoped,
        order_by(sort_by, sort_order),
        limit,
        offset,
    )
    return PaginatedResult[Span].model_construct(
        items=[span_from_row(row) for row in rows], limit=limit, offset=offset, total=total
    )


async def resources_page(
    st: StoreTransaction, where: Where, sort_by: Optional[str], sort_order: str, limit: int, offset: int
) -> PaginatedResult[ResourcesUpdate]:
    rows, total = await _page(
        st,
        "SELECT " + RESOURCES_COLUMNS + " FROM {resources}",
        "SELECT COUNT(*) FROM {resources}",
        where,
        order_by(sort_by, sort_order),
        limit,
        offset,
    )
    return PaginatedResult[ResourcesUpdate].model_construct(
        items=[resources_from_row(row) for row in rows], limit=limit, offset=offset, total=total
    )


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
    rows, total = await _page(
        st,
        "SELECT " + WORKER_COLUMNS + " FROM {workers}",
        "SELECT COUNT(*) FROM {workers}",
        where,
        order_by(sort_by, sort_order),
        limit,
        offset,
    )
    return PaginatedResult[Worker].model_construct(
        items=[worker_from_row(row) for row in rows], limit=limit, offset=offset, total=total
    )


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
