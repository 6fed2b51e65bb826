"""The FastAPI app that exposes a `LightningStore` over HTTP (REST under /v1/agl, OTLP under /v1).

Every route answers errors as JSON (see `_http_errors`); nothing a client sends can stop the server.
Request bodies and response shaping live in `_http_bodies`, auth and metrics in `_http_middleware`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Optional, Union

from fastapi import APIRouter, FastAPI, Query, Request
from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response

from agentlightning.types import (
    ROLLOUT_STATUSES,
    TERMINAL_ROLLOUT_STATUSES,
    Attempt,
    AttemptedRollout,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    Span,
    Worker,
)
from agentlightning.utils.metrics import MetricsBackend, find_prometheus_backend

from ._http_bodies import (
    JSON_MEDIA_TYPE,
    DequeueBody,
    EnqueueBody,
    ManySequenceIdsBody,
    NextSequenceIdBody,
    QueryAttemptsBody,
    QueryRolloutsBody,
    QuerySpansBody,
    QueryWorkersBody,
    StartAttemptBody,
    StartRolloutBody,
    StoreRoute,
    UpdateAttemptBody,
    UpdateRolloutBody,
    UpdateWorkerBody,
    WaitBody,
    attempts_exist,
    check_page,
    json_response,
    missing_or,
    not_found,
    present_fields,
    read_json,
    reject_nulls,
    validation_error,
)
from ._http_bodies import attempt_exists as has_attempt
from ._http_errors import HTTPError
from ._http_middleware import BearerAuthMiddleware, HttpMetricsMiddleware, prometheus_app
from ._http_otlp import build_otlp_router
from ._resources_hint import RESOURCES_VERSIONS_HEADER, WANT_RESOURCES_VERSIONS_HEADER, resources_versions_header
from .base import LightningStore
from .utils import check_attempt_status, check_filter_logic, check_mode, check_rollout_status, check_worker_status

__all__ = ["API_PREFIX", "HEALTH_PATH", "WAIT_CAP_SECONDS", "WAIT_COMPLETE_HEADER", "ServingState", "build_store_app"]

API_PREFIX = "/v1/agl"
HEALTH_PATH = API_PREFIX + "/health"
# Longest a single `POST /waits/rollouts` long-poll blocks; clients loop for longer waits.
WAIT_CAP_SECONDS = 30.0
WAIT_COMPLETE_HEADER = "X-AGL-Wait-Complete"

_RESOURCES: TypeAdapter[dict[str, Any]] = TypeAdapter(NamedResources)
_LIVE_STATUSES: list[Any] = [s for s in ROLLOUT_STATUSES if s not in TERMINAL_ROLLOUT_STATUSES]
_SPANS: TypeAdapter[list[Span]] = TypeAdapter(list[Span])


def store_of(request: Request) -> LightningStore:
    """The store served by the app handling `request`."""
    return request.app.state.agl_store


def serving_of(request: Request) -> ServingState:
    return request.app.state.agl_serving


class ServingState:
    """What the running app knows about its event loop; lets the owner end long-polls at shutdown."""

    def __init__(self) -> None:
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.shutdown: Optional[asyncio.Future[None]] = None

    def started(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.shutdown = self.loop.create_future()

    def request_shutdown(self) -> None:
        """Wake every pending long-poll (callable from any thread)."""
        loop, future = self.loop, self.shutdown
        if loop is None or future is None or loop.is_closed():
            return

        def _set() -> None:
            if not future.done():
                future.set_result(None)

        try:
            if loop is asyncio.get_running_loop():
                _set()
                return
        except RuntimeError:
            pass
        try:
            loop.call_soon_threadsafe(_set)
        except RuntimeError:
            pass  # the loop closed meanwhile: nothing left to wake


def _build_api() -> APIRouter:
    """The REST routes; stateless, so one router serves every app (each app carries its own store)."""
    api = APIRouter(prefix=API_PREFIX, route_class=StoreRoute)

    async def rollout_exists(store: LightningStore, rollout_id: str) -> bool:
        return await store.get_rollout_by_id(rollout_id) is not None

    async def attempt_exists(store: LightningStore, rollout_id: str, attempt_id: str) -> bool:
        return await has_attempt(store, rollout_id, attempt_id)

    @api.get("/health")
    async def health() -> Response:
        return Response(b'{"status":"ok"}', media_type=JSON_MEDIA_TYPE)

    # ---- queue and rollouts ----

    @api.post("/queues/rollouts/enqueue", status_code=201, response_model=list[Rollout])
    async def enqueue_rollouts(request: Request) -> Response:
        store = store_of(request)
        body = await read_json(request, EnqueueBody)
        for r in body.rollouts:
            check_mode(r.mode)
        return json_response(await store.enqueue_many_rollouts(body.rollouts), 201)

    @api.post("/queues/rollouts/dequeue", response_model=list[AttemptedRollout])
    async def dequeue_rollouts(request: Request) -> Response:
        """Claim rollouts; with `X-AGL-Want-Resources-Versions` also report their resources' versions."""
        store = store_of(request)
        body = await read_json(request, DequeueBody, optional=True)
        if body.limit <= 0:
            return json_response([])
        claimed = await store.dequeue_many_rollouts(limit=body.limit, worker_id=body.worker_id)
        response = json_response(claimed)
        if claimed and WANT_RESOURCES_VERSIONS_HEADER in request.headers:
            response.headers[RESOURCES_VERSIONS_HEADER] = await resources_versions_header(store, claimed)
        return response

    @api.post("/rollouts", status_code=201, response_model=AttemptedRollout)
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

    async def query_rollouts(store: LightningStore, q: QueryRolloutsBody) -> Response:
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

    @api.get("/rollouts", response_model=PaginatedResult[Union[AttemptedRollout, Rollout]])
    async def get_rollouts(
        request: Request,
        status_in: Optional[list[str]] = Query(None),
        rollout_id_in: Optional[list[str]] = Query(None),
        rollout_id_contains: Optional[str] = None,
        filter_logic: str = "and",
        sort_by: Optional[str] = None,
        sort_order: str = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> Response:
        store = store_of(request)
        return await query_rollouts(
            store,
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

    @api.post("/rollouts/search", response_model=PaginatedResult[Union[AttemptedRollout, Rollout]])
    async def search_rollouts(request: Request) -> Response:
        store = store_of(request)
        return await query_rollouts(store, await read_json(request, QueryRolloutsBody, optional=True))

    @api.get("/rollouts/{rollout_id}", response_model=Union[AttemptedRollout, Rollout])
    async def get_rollout(request: Request, rollout_id: str) -> Response:
        store = store_of(request)
        rollout = await store.get_rollout_by_id(rollout_id)
        if rollout is None:
            raise not_found(f"rollout {rollout_id!r}")
        return json_response(rollout)

    @api.post("/rollouts/{rollout_id}", response_model=Rollout)
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

    # ---- attempts ----

    @api.post("/rollouts/{rollout_id}/attempts", status_code=201, response_model=AttemptedRollout)
    async def start_attempt(rollout_id: str, request: Request) -> Response:
        store = store_of(request)
        body = await read_json(request, StartAttemptBody, optional=True)
        try:
            return json_response(await store.start_attempt(rollout_id, worker_id=body.worker_id), 201)
        except (ValueError, KeyError) as exc:
            raise await missing_or(exc, lambda: rollout_exists(store, rollout_id)) from None

    async def query_attempts(store: LightningStore, rollout_id: str, q: QueryAttemptsBody) -> Response:
        check_page("attempt", q.sort_by, q.sort_order, q.limit, q.offset)
        result = await store.query_attempts(
            rollout_id,
            sort_by=q.sort_by,
            sort_order=q.sort_order,  # type: ignore[arg-type]
            limit=q.limit,
            offset=q.offset,
        )
        return json_response(result)

    @api.get("/rollouts/{rollout_id}/attempts", response_model=PaginatedResult[Attempt])
    async def get_attempts(
        request: Request,
        rollout_id: str,
        sort_by: Optional[str] = "sequence_id",
        sort_order: str = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> Response:
        store = store_of(request)
        body = QueryAttemptsBody(sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset)
        return await query_attempts(store, rollout_id, body)

    @api.post("/rollouts/{rollout_id}/attempts/search", response_model=PaginatedResult[Attempt])
    async def search_attempts(rollout_id: str, request: Request) -> Response:
        store = store_of(request)
        return await query_attempts(store, rollout_id, await read_json(request, QueryAttemptsBody, optional=True))

    @api.get("/rollouts/{rollout_id}/attempts/latest", response_model=Attempt)
    async def get_latest_attempt(request: Request, rollout_id: str) -> Response:
        store = store_of(request)
        attempt = await store.get_latest_attempt(rollout_id)
        if attempt is None:
            raise not_found(f"latest attempt of rollout {rollout_id!r}")
        return json_response(attempt)

    @api.post("/rollouts/{rollout_id}/attempts/{attempt_id}", response_model=Attempt)
    async def update_attempt(rollout_id: str, attempt_id: str, request: Request) -> Response:
        store = store_of(request)
        body = await read_json(request, UpdateAttemptBody)
        # worker_id / last_heartbeat_time / metadata may be cleared with null, as in-process stores allow.
        reject_nulls(body, ("status",))
        fields = present_fields(body)
        if "status" in fields:
            check_attempt_status(fields["status"])
        try:
            return json_response(await store.update_attempt(rollout_id, attempt_id, **fields))
        except (ValueError, KeyError) as exc:
            raise await missing_or(exc, lambda: attempt_exists(store, rollout_id, attempt_id)) from None

    # ---- workers ----

    async def query_workers(store: LightningStore, q: QueryWorkersBody) -> Response:
        check_filter_logic(q.filter_logic)
        check_page("worker", q.sort_by, q.sort_order, q.limit, q.offset)
        for status in q.status_in or []:
            check_worker_status(status)
        result = await store.query_workers(
            status_in=q.status_in,  # type: ignore[arg-type]
            worker_id_contains=q.worker_id_contains,
            filter_logic=q.filter_logic,  # type: ignore[arg-type]
            sort_by=q.sort_by,
            sort_order=q.sort_order,  # type: ignore[arg-type]
            limit=q.limit,
            offset=q.offset,
        )
        return json_response(result)

    @api.get("/workers", response_model=PaginatedResult[Worker])
    async def get_workers(
        request: Request,
        status_in: Optional[list[str]] = Query(None),
        worker_id_contains: Optional[str] = None,
        filter_logic: str = "and",
        sort_by: Optional[str] = None,
        sort_order: str = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> Response:
        store = store_of(request)
        return await query_workers(
            store,
            QueryWorkersBody(
                status_in=status_in,
                worker_id_contains=worker_id_contains,
                filter_logic=filter_logic,
                sort_by=sort_by,
                sort_order=sort_order,
                limit=limit,
                offset=offset,
            ),
        )

    @api.post("/workers/search", response_model=PaginatedResult[Worker])
    async def search_workers(request: Request) -> Response:
        store = store_of(request)
        return await query_workers(store, await read_json(request, QueryWorkersBody, optional=True))

    @api.get("/workers/{worker_id}", response_model=Worker)
    async def get_worker(request: Request, worker_id: str) -> Response:
        store = store_of(request)
        worker = await store.get_worker_by_id(worker_id)
        if worker is None:
            raise not_found(f"worker {worker_id!r}")
        return json_response(worker)

    @api.post("/workers/{worker_id}", response_model=Worker)
    async def update_worker(worker_id: str, request: Request) -> Response:
        store = store_of(request)
        body = await read_json(request, UpdateWorkerBody, optional=True)
        reject_nulls(body, ("heartbeat_stats",))
        return json_response(await store.update_worker(worker_id, **present_fields(body)))

    @api.get("/statistics")
    async def statistics(request: Request) -> Response:
        store = store_of(request)
        return json_response(await store.statistics())

    # ---- resources ----

    async def read_resources(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw.strip():
            raise HTTPError(400, "request body required: a JSON object of name -> resource")
        try:
            return _RESOURCES.validate_json(raw)
        except ValidationError as exc:
            raise validation_error(exc, "resources") from None

    @api.get("/resources", response_model=PaginatedResult[ResourcesUpdate])
    async def query_resources(
        request: Request,
        resources_id: Optional[str] = None,
        resources_id_contains: Optional[str] = None,
        sort_by: Optional[str] = None,
        sort_order: str = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> Response:
        store = store_of(request)
        check_page("resources", sort_by, sort_order, limit, offset)
        result = await store.query_resources(
            resources_id=resources_id,
            resources_id_contains=resources_id_contains,
            sort_by=sort_by,
            sort_order=sort_order,  # type: ignore[arg-type]
            limit=limit,
            offset=offset,
        )
        return json_response(result)

    @api.post("/resources", status_code=201, response_model=ResourcesUpdate)
    async def add_resources(request: Request) -> Response:
        store = store_of(request)
        return json_response(await store.add_resources(await read_resources(request)), 201)

    @api.get("/resources/latest", response_model=ResourcesUpdate)
    async def get_latest_resources(request: Request) -> Response:
        store = store_of(request)
        resources = await store.get_latest_resources()
        if resources is None:
            raise not_found("latest resources (none added yet)")
        return json_response(resources)

    @api.get("/resources/{resources_id}", response_model=ResourcesUpdate)
    async def get_resources(request: Request, resources_id: str) -> Response:
        store = store_of(request)
        resources = await store.get_resources_by_id(resources_id)
        if resources is None:
            raise not_found(f"resources {resources_id!r}")
        return json_response(resources)

    @api.post("/resources/{resources_id}", response_model=ResourcesUpdate)
    async def update_resources(resources_id: str, request: Request) -> Response:
        store = store_of(request)
        return json_response(await store.update_resources(resources_id, await read_resources(request)))

    # ---- spans ----

    @api.post("/spans", status_code=201, response_model=Span)
    async def add_span(request: Request) -> Response:
        store = store_of(request)
        raw = await request.body()
        if not raw.strip():
            raise HTTPError(400, "request body required: a JSON span")
        try:
            span = Span.model_validate_json(raw)
        except ValidationError as exc:
            raise validation_error(exc, "span") from None
        try:
            return json_response(await store.add_span(span), 201)
        except (ValueError, KeyError) as exc:
            raise await missing_or(exc, lambda: attempt_exists(store, span.rollout_id, span.attempt_id)) from None

    async def query_spans(store: LightningStore, q: QuerySpansBody) -> Response:
        check_filter_logic(q.filter_logic)
        check_page("span", q.sort_by, q.sort_order, q.limit, q.offset)
        fields = q.model_dump()
        rollout_id = fields.pop("rollout_id")
        attempt_id = fields.pop("attempt_id")
        return json_response(await store.query_spans(rollout_id, attempt_id, **fields))

    @api.get("/spans", response_model=PaginatedResult[Span])
    async def get_spans(
        request: Request,
        rollout_id: str,
        attempt_id: Optional[str] = None,
        trace_id: Optional[str] = None,
        trace_id_contains: Optional[str] = None,
        span_id: Optional[str] = None,
        span_id_contains: Optional[str] = None,
        parent_id: Optional[str] = None,
        parent_id_contains: Optional[str] = None,
        name: Optional[str] = None,
        name_contains: Optional[str] = None,
        filter_logic: str = "and",
        limit: int = -1,
        offset: int = 0,
        sort_by: Optional[str] = "sequence_id",
        sort_order: str = "asc",
    ) -> Response:
        store = store_of(request)
        return await query_spans(
            store,
            QuerySpansBody(
                rollout_id=rollout_id,
                attempt_id=attempt_id,
                trace_id=trace_id,
                trace_id_contains=trace_id_contains,
                span_id=span_id,
                span_id_contains=span_id_contains,
                parent_id=parent_id,
                parent_id_contains=parent_id_contains,
                name=name,
                name_contains=name_contains,
                filter_logic=filter_logic,
                limit=limit,
                offset=offset,
                sort_by=sort_by,
                sort_order=sort_order,
            ),
        )

    @api.post("/spans/search", response_model=PaginatedResult[Span])
    async def search_spans(request: Request) -> Response:
        store = store_of(request)
        return await query_spans(store, await read_json(request, QuerySpansBody))

    @api.post("/spans/many", status_code=201, response_model=list[Span])
    async def add_many_spans(request: Request) -> Response:
        store = store_of(request)
        raw = await request.body()
        try:
            spans = _SPANS.validate_json(raw)
        except ValidationError as exc:
            raise validation_error(exc, "spans (a JSON list of spans)") from None
        try:
            return json_response(list(await store.add_many_spans(spans)), 201)
        except (ValueError, KeyError) as exc:
            pairs = {(s.rollout_id, s.attempt_id) for s in spans}
            raise await missing_or(exc, lambda: attempts_exist(store, pairs)) from None

    @api.post("/spans/next/many")
    async def many_sequence_ids(request: Request) -> Response:
        store = store_of(request)
        body = await read_json(request, ManySequenceIdsBody)
        sequence_ids = await store.get_many_span_sequence_ids(body.rollout_attempt_ids)
        return json_response({"sequence_ids": sequence_ids})

    @api.post("/spans/next")
    async def next_sequence_id(request: Request) -> Response:
        store = store_of(request)
        body = await read_json(request, NextSequenceIdBody)
        try:
            sequence_id = await store.get_next_span_sequence_id(body.rollout_id, body.attempt_id)
        except (ValueError, KeyError) as exc:
            raise await missing_or(exc, lambda: attempt_exists(store, body.rollout_id, body.attempt_id)) from None
        return Response(b'{"sequence_id":%d}' % sequence_id, media_type=JSON_MEDIA_TYPE)

    # ---- waiting ----

    async def wait_complete(
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

    @api.post("/waits/rollouts", response_model=list[Rollout])
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
        complete, finished = await wait_complete(store, ids, finished)
        response = json_response(finished)
        response.headers[WAIT_COMPLETE_HEADER] = "true" if complete else "false"
        return response

    _put_hot_routes_first(api)
    return api


# Routes a runner hits for every span / rollout, in an order that keeps literal paths (".../search")
# ahead of the templates they would otherwise match. Starlette tries routes in order, so serving
# these first saves a few dozen regex matches per request on the hot path.
_HOT_ROUTES: tuple[tuple[str, str], ...] = (
    ("POST", "/spans"),
    ("POST", "/spans/next"),
    ("POST", "/spans/many"),
    ("POST", "/spans/next/many"),
    ("POST", "/queues/rollouts/dequeue"),
    ("POST", "/rollouts/{rollout_id}/attempts/search"),
    ("POST", "/rollouts/{rollout_id}/attempts/{attempt_id}"),
    ("POST", "/workers/search"),
    ("POST", "/workers/{worker_id}"),
    ("GET", "/resources/latest"),
    ("GET", "/resources/{resources_id}"),
    ("POST", "/waits/rollouts"),
)


def _put_hot_routes_first(router: APIRouter) -> None:
    rank = {(method, API_PREFIX + path): i for i, (method, path) in enumerate(_HOT_ROUTES)}

    def key(item: tuple[int, Any]) -> tuple[int, int]:
        index, route = item
        methods = getattr(route, "methods", None) or set()
        hot = min((rank[(m, route.path)] for m in methods if (m, route.path) in rank), default=None)
        return (0, hot) if hot is not None else (1, index)

    router.routes[:] = [route for _, route in sorted(enumerate(router.routes), key=key)]


_ROUTERS: Optional[tuple[APIRouter, APIRouter]] = None
_ROUTERS_LOCK = threading.Lock()


def _shared_routers() -> tuple[APIRouter, APIRouter]:
    """Build the REST and OTLP routers once per process: route setup costs far more than including them."""
    global _ROUTERS
    with _ROUTERS_LOCK:
        if _ROUTERS is None:
            _ROUTERS = (_build_api(), build_otlp_router())
        return _ROUTERS


def _mount_dashboard(app: FastAPI) -> bool:
    """Add the dashboard (its endpoints, and its pages at `/`); False when the package ships without it.

    The dashboard shows adapter output (triplets), so it lives above the store layer and is imported
    lazily, only when an app is built.
    """
    try:
        from agentlightning.dashboard.routes import mount_dashboard
    except ImportError:
        return False
    mount_dashboard(app)
    return True


def build_store_app(
    store: LightningStore,
    state: ServingState,
    *,
    auth_token: Optional[str] = None,
    cors_allow_origins: Optional[Sequence[str]] = None,
    tracker: Optional[MetricsBackend] = None,
) -> FastAPI:
    """The complete app: REST API, OTLP ingestion, optional Prometheus metrics and dashboard."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        state.started()
        yield
        state.request_shutdown()

    app = FastAPI(
        title="Agent Lightning Store",
        description="REST access to a LightningStore: rollouts, attempts, spans, resources and workers.",
        version="0.3.0",
        lifespan=lifespan,
    )
    app.state.agl_store = store
    app.state.agl_serving = state
    api, otlp = _shared_routers()
    # Route objects hold no per-app state (the store comes from `request.app.state`), so every app shares
    # them; adding them directly (not via include_router) also keeps per-request routing overhead minimal.
    app.router.routes.extend([*api.routes, *otlp.routes])

    prometheus = find_prometheus_backend(tracker)
    if prometheus is not None:
        app.mount("/v1/prometheus", prometheus_app(prometheus.registry))

    dashboard = _mount_dashboard(app)  # last: its pages are mounted at "/"

    def public(path: str) -> bool:
        if path == HEALTH_PATH:
            return True
        # The dashboard's static files hold no data; its API calls still need the token.
        return dashboard and not path.startswith("/v1/")

    if auth_token:
        app.add_middleware(BearerAuthMiddleware, token=auth_token, public=public)  # type: ignore[arg-type]
    if cors_allow_origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,  # type: ignore[arg-type]
            allow_origins=list(cors_allow_origins),
            allow_methods=["*"],
            allow_headers=["*"],
            allow_credentials="*" not in cors_allow_origins,
        )
    if tracker is not None:
        app.add_middleware(HttpMetricsMiddleware, tracker=tracker)  # type: ignore[arg-type]
    return app
