"""Rollout routes: the queue (enqueue, dequeue), starting, querying and updating rollouts, and waiting for them."""

from __future__ import annotations

import asyncio
from typing import Any, Optional, Union

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from agentlightning.store.base import LightningStore
from agentlightning.store.utils import check_filter_logic, check_mode, check_rollout_status
from agentlightning.types import (
    ROLLOUT_STATUSES,
    TERMINAL_ROLLOUT_STATUSES,
    AttemptedRollout,
    PaginatedResult,
    Rollout,
)

from .._resources_hint import RESOURCES_VERSIONS_HEADER, WANT_RESOURCES_VERSIONS_HEADER, resources_versions_header
from ..bodies import (
    DequeueBody,
    EnqueueBody,
    QueryRolloutsBody,
    StartRolloutBody,
    StoreRoute,
    UpdateRolloutBody,
    WaitBody,
    check_page,
    int64_query,
    json_response,
    missing_or,
    not_found,
    present_fields,
    read_json,
    reject_nulls,
)
from ..context import API_PREFIX, serving_of, store_of
from ..errors import HTTPError
from ..openapi import json_body

__all__ = ["LONG_POLL_HEADER", "WAIT_CAP_SECONDS", "WAIT_COMPLETE_HEADER", "router"]

# Longest a single long-poll (`POST /waits/rollouts`, a dequeue with `wait`) blocks; clients loop for longer waits.
WAIT_CAP_SECONDS = 30.0
WAIT_COMPLETE_HEADER = "X-AGL-Wait-Complete"
# On a dequeue answer: the seconds this server long-polled for it (clients tell it from a server that ignores `wait`).
LONG_POLL_HEADER = "X-AGL-Long-Poll"

_LIVE_STATUSES: list[Any] = [s for s in ROLLOUT_STATUSES if s not in TERMINAL_ROLLOUT_STATUSES]


async def rollout_exists(store: LightningStore, rollout_id: str) -> bool:
    return await store.get_rollout_by_id(rollout_id) is not None


async def _query_rollouts(store: LightningStore, q: QueryRolloutsBody) -> Response:
    check_filter_logic(q.filter_logic)
    check_page("rollout", q.sort_by, q.sort_order, q.limit, q.offset)
    for status in (q.status_in or []) + (q.status or []):
        check_rollout_status(status)
    result = await store.query_rollouts(
        status_in=q.status_in,  # type: ignore[arg-type]
        rollout_id_in=q.rollout_id_in,
        rollout_id_contains=q.rollout_id_contains,
        filter_logic=q.filter_logic,  # type: ignore[arg-type]
        sort_by=q.sort_by,
        sort_order=q.sort_order,  # type: ignore[arg-type]
        limit=q.limit,
        offset=q.offset,
        status=q.status,  # type: ignore[arg-type]
        rollout_ids=q.rollout_ids,
    )
    return json_response(result)


async def _wait_complete(
    store: LightningStore, rollout_ids: list[str], finished: list[Rollout]
) -> tuple[bool, list[Rollout]]:
    """Whether every *known* rollout among the ids is terminal (unknown ids never finish), and the result.

    Waiters poll with many ids, so the common "still running" answer costs one count, not a read of them all.
    """
    done = {r.rollout_id for r in finished}
    pending = [i for i in dict.fromkeys(rollout_ids) if i not in done]
    if not pending:
        return True, finished
    running = await store.query_rollouts(rollout_id_in=pending, status_in=_LIVE_STATUSES, limit=1)
    if running.total > 0:
        return False, finished
    # The rest are unknown, or finished after the wait returned: answer with them too.
    late = {r.rollout_id: r for r in await store.query_rollouts(rollout_id_in=pending) if r.is_terminal()}
    if not late:
        return True, finished
    by_id = {**{r.rollout_id: r for r in finished}, **late}
    return True, [by_id[i] for i in rollout_ids if i in by_id]


async def _client_gone(request: Request) -> None:
    """Returns when the client disconnects (its body was read, so the next ASGI message is the hang-up)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _long_poll_dequeue(
    request: Request, store: LightningStore, body: DequeueBody, wait: float
) -> list[AttemptedRollout]:
    """`wait_for_dequeue`, given up (answering empty) when the server shuts down or the client leaves."""
    claim = asyncio.ensure_future(
        store.wait_for_dequeue(timeout=wait, limit=body.limit, worker_id=body.worker_id, run=body.run)
    )
    gone = asyncio.ensure_future(_client_gone(request))
    shutdown = serving_of(request).shutdown
    try:
        await asyncio.wait(
            [claim, gone] if shutdown is None else [claim, gone, shutdown], return_when="FIRST_COMPLETED"
        )
    finally:
        gone.cancel()
    if not claim.done():
        claim.cancel()
        await asyncio.wait([claim])  # a claim that completed meanwhile is still answered
    return [] if claim.cancelled() else claim.result()


router = APIRouter(prefix=API_PREFIX, route_class=StoreRoute, tags=["rollouts"])


@router.post(
    "/queues/rollouts/enqueue", status_code=201, response_model=list[Rollout], openapi_extra=json_body(EnqueueBody)
)
async def enqueue_rollouts(request: Request) -> Response:
    store = store_of(request)
    body = await read_json(request, EnqueueBody)
    for r in body.rollouts:
        check_mode(r.mode)
    return json_response(await store.enqueue_many_rollouts(body.rollouts), 201)


@router.post(
    "/queues/rollouts/dequeue",
    response_model=list[AttemptedRollout],
    openapi_extra=json_body(DequeueBody, required=False),
)
async def dequeue_rollouts(request: Request) -> Response:
    """Claim rollouts; with `X-AGL-Want-Resources-Versions` also report their resources' versions.

    With `wait` > 0 an empty queue is long-polled: the answer comes as soon as a rollout is queued, or
    empty after min(wait, WAIT_CAP_SECONDS), at shutdown, or (unread) when the client hangs up.
    """
    store = store_of(request)
    body = await read_json(request, DequeueBody, optional=True)
    if body.wait is not None and not body.wait >= 0:
        raise HTTPError(400, f"wait must be >= 0 seconds or null, got {body.wait}")
    if body.limit <= 0:
        return json_response([])
    wait = min(body.wait or 0.0, WAIT_CAP_SECONDS)
    if wait == 0:
        claimed = await store.dequeue_many_rollouts(limit=body.limit, worker_id=body.worker_id, run=body.run)
    else:
        claimed = await _long_poll_dequeue(request, store, body, wait)
    response = json_response(claimed)
    if body.wait is not None:
        response.headers[LONG_POLL_HEADER] = f"{wait:g}"
    if claimed and WANT_RESOURCES_VERSIONS_HEADER in request.headers:
        response.headers[RESOURCES_VERSIONS_HEADER] = await resources_versions_header(store, claimed)
    return response


@router.post("/rollouts", status_code=201, response_model=AttemptedRollout, openapi_extra=json_body(StartRolloutBody))
async def start_rollout(request: Request) -> Response:
    store = store_of(request)
    body = await read_json(request, StartRolloutBody)
    check_mode(body.mode)
    rollout = await store.start_rollout(
        input=body.input,
        mode=body.mode,  # type: ignore[arg-type]
        resources_id=body.resources_id,
        config=body.config,
        metadata=body.metadata,
        worker_id=body.worker_id,
    )
    return json_response(rollout, 201)


@router.get("/rollouts", response_model=PaginatedResult[Union[AttemptedRollout, Rollout]])
async def get_rollouts(
    request: Request,
    status_in: Optional[list[str]] = Query(None),
    rollout_id_in: Optional[list[str]] = Query(None),
    rollout_id_contains: Optional[str] = None,
    filter_logic: str = "and",
    sort_by: Optional[str] = None,
    sort_order: str = "asc",
    limit: int = int64_query(-1),
    offset: int = int64_query(0),
) -> Response:
    return await _query_rollouts(
        store_of(request),
        QueryRolloutsBody(
            status_in=status_in,
            rollout_id_in=rollout_id_in,
            rollout_id_contains=rollout_id_contains,
            filter_logic=filter_logic,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        ),
    )


@router.post(
    "/rollouts/search",
    response_model=PaginatedResult[Union[AttemptedRollout, Rollout]],
    openapi_extra=json_body(QueryRolloutsBody, required=False),
)
async def search_rollouts(request: Request) -> Response:
    return await _query_rollouts(store_of(request), await read_json(request, QueryRolloutsBody, optional=True))


@router.get("/rollouts/{rollout_id}", response_model=Union[AttemptedRollout, Rollout])
async def get_rollout(request: Request, rollout_id: str) -> Response:
    rollout = await store_of(request).get_rollout_by_id(rollout_id)
    if rollout is None:
        raise not_found(f"rollout {rollout_id!r}")
    return json_response(rollout)


@router.post("/rollouts/{rollout_id}", response_model=Rollout, openapi_extra=json_body(UpdateRolloutBody))
async def update_rollout(rollout_id: str, request: Request) -> Response:
    store = store_of(request)
    body = await read_json(request, UpdateRolloutBody)
    reject_nulls(body, ("status", "config"))
    fields = present_fields(body)
    if "status" in fields:
        check_rollout_status(fields["status"])
    if "mode" in fields:
        check_mode(fields["mode"])
    try:
        return json_response(await store.update_rollout(rollout_id, **fields))
    except (ValueError, KeyError) as exc:
        raise await missing_or(exc, lambda: rollout_exists(store, rollout_id)) from None


@router.post("/waits/rollouts", response_model=list[Rollout], openapi_extra=json_body(WaitBody))
async def wait_for_rollouts(request: Request) -> Response:
    """Long-poll: wait up to min(timeout, WAIT_CAP_SECONDS); header X-AGL-Wait-Complete says if all finished."""
    store = store_of(request)
    body = await read_json(request, WaitBody)
    if body.timeout is not None and body.timeout < 0:
        raise HTTPError(400, f"timeout must be >= 0 seconds or null, got {body.timeout}")
    timeout = WAIT_CAP_SECONDS if body.timeout is None else min(body.timeout, WAIT_CAP_SECONDS)
    ids = body.rollout_ids
    shutdown = serving_of(request).shutdown
    if timeout == 0 or shutdown is None:
        finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=timeout)
    else:
        waiter: asyncio.Future[list[Rollout]] = asyncio.ensure_future(
            store.wait_for_rollouts(rollout_ids=ids, timeout=timeout)
        )
        await asyncio.wait([waiter, shutdown], return_when=asyncio.FIRST_COMPLETED)
        if waiter.done():
            finished = waiter.result()
        else:
            waiter.cancel()  # the server is stopping: answer with what is finished now
            finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
    complete, finished = await _wait_complete(store, ids, finished)
    response = json_response(finished)
    response.headers[WAIT_COMPLETE_HEADER] = "true" if complete else "false"
    return response
