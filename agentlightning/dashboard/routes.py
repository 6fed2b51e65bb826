"""HTTP side of the dashboard: the endpoints its pages read, and the static pages themselves.

Endpoints (prefix `/v1/agl`, behind the server's bearer token like the rest of the API):

| Method | Path | Returns |
|---|---|---|
| GET | /dashboard/info | `{status, server_time, version, store}`; the pages' connection check and clock |
| GET | /dashboard/overview | rollouts and workers counted by status (and live/offline), store statistics |
| GET | /dashboard/rollouts | a page of rollout rows with attempts, duration, final reward, error and run (`run_in` filters) |
| GET | /dashboard/workers | a page of workers with the status shown (busy, idle, offline, unknown), and counts |
| GET | /rollouts/{rollout_id}/triplets | triplets + drop report of an attempt (`attempt_id`, default latest) |
| GET | /analytics/rewards | final reward of the most recently finished rollouts, oldest first |
| GET | /analytics/throughput | finished rollouts per time bucket, by status |

The pages are plain files under `static/`, served at `/` without auth (they hold no data).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from fastapi import APIRouter, FastAPI, Query, Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from agentlightning.store.base import LightningStore
from agentlightning.store_http.bodies import StoreRoute, int64_query, json_response
from agentlightning.store_http.errors import HTTPError
from agentlightning.store_http.openapi import document_parameter
from agentlightning.types import WORKER_STATUSES

from .analytics import MAX_SERIES_POINTS, reward_series, throughput
from .finished import FinishedRollouts
from .rewards import FinalRewards
from .summaries import status_counts, summarize_rollouts
from .tokens import token_report
from .triplets import NoSuchAttempt, attempt_triplets
from .workers import SHOWN_WORKER_STATUSES, split_offline, worker_page

__all__ = [
    "API_PREFIX",
    "STATIC_DIR",
    "DashboardCaches",
    "dashboard_caches",
    "build_dashboard_router",
    "dashboard_router",
    "mount_dashboard",
]

API_PREFIX = "/v1/agl"
STATIC_DIR = Path(__file__).resolve().parent / "static"


@dataclass
class DashboardCaches:
    """What one app remembers between dashboard refreshes: rewards and finished rollouts."""

    rewards: FinalRewards = field(default_factory=FinalRewards)
    finished: FinishedRollouts = field(default_factory=FinishedRollouts)


def _store(request: Request) -> LightningStore:
    return request.app.state.agl_store


def dashboard_caches(app: FastAPI) -> DashboardCaches:
    """The dashboard caches of `app`, created on first use (the dashboard router is shared by every app)."""
    caches: Optional[DashboardCaches] = getattr(app.state, "agl_dashboard", None)
    if caches is None:
        caches = app.state.agl_dashboard = DashboardCaches()
    return caches


def _caches(request: Request) -> DashboardCaches:
    return dashboard_caches(request.app)


def _version() -> str:
    import agentlightning

    return agentlightning.__version__


# The dashboard's REST routes, built once: each app carries its store and caches in `app.state`.
_api = APIRouter(prefix=API_PREFIX, route_class=StoreRoute)


@_api.get("/dashboard/info")
async def info(request: Request) -> Response:
    store = _store(request)
    return json_response(
        {"status": "ok", "server_time": time.time(), "version": _version(), "store": type(store).__name__}
    )


@_api.get("/dashboard/overview")
async def overview(request: Request) -> Response:
    store = _store(request)
    workers: dict[str, int] = {}
    for status in WORKER_STATUSES:
        workers[status] = (await store.query_workers(status_in=[status], limit=1)).total  # type: ignore[list-item]
    live, offline = split_offline(await store.query_workers(status_in=["busy", "idle"]), time.time())
    try:
        statistics: Optional[dict[str, Any]] = dict(await store.statistics())
    except NotImplementedError:
        statistics = None
    return json_response(
        {
            "server_time": time.time(),
            "rollouts_by_status": await status_counts(store),
            "workers_by_status": workers,
            "live_workers_by_status": live,
            "workers_offline": offline,
            "statistics": statistics,
        }
    )


@_api.get("/dashboard/rollouts")
async def rollouts(
    request: Request,
    status_in: Optional[list[str]] = Query(None),
    mode_in: Optional[list[str]] = Query(None),
    run_in: Optional[list[str]] = Query(None),
    rollout_id_contains: Optional[str] = None,
    sort_by: Optional[str] = "start_time",
    sort_order: str = "desc",
    limit: int = int64_query(20),
    offset: int = int64_query(0),
) -> Response:
    page = await summarize_rollouts(
        _store(request),
        _caches(request).rewards,
        status_in=status_in,
        mode_in=mode_in,
        run_in=run_in,
        rollout_id_contains=rollout_id_contains or None,
        sort_by=sort_by,
        sort_order=sort_order,  # type: ignore[arg-type]
        limit=limit,
        offset=offset,
    )
    return json_response(page)


document_parameter(API_PREFIX + "/dashboard/workers", "status_in", items={"enum": list(SHOWN_WORKER_STATUSES)})


@_api.get("/dashboard/workers")
async def workers(
    request: Request,
    status_in: Optional[list[str]] = Query(None),
    sort_by: Optional[str] = "worker_id",
    sort_order: str = "asc",
    limit: int = int64_query(20),
    offset: int = int64_query(0),
) -> Response:
    page = await worker_page(
        _store(request),
        time.time(),
        status_in=status_in,
        sort_by=sort_by,
        sort_order=sort_order,  # type: ignore[arg-type]
        limit=limit,
        offset=offset,
    )
    return json_response(page)


@_api.get("/rollouts/{rollout_id}/triplets")
async def triplets(request: Request, rollout_id: str, attempt_id: Optional[str] = None) -> Response:
    try:
        result = await attempt_triplets(_store(request), rollout_id, attempt_id)
    except NoSuchAttempt as exc:
        raise HTTPError(404, str(exc)) from None
    return json_response(result)


@_api.get("/analytics/rewards")
async def rewards(
    request: Request,
    mode_in: Optional[list[str]] = Query(None),
    limit: int = Query(2000, ge=1, le=MAX_SERIES_POINTS),
) -> Response:
    caches = _caches(request)
    series = await reward_series(_store(request), caches.rewards, mode_in=mode_in, limit=limit, cache=caches.finished)
    return json_response(series)


@_api.get("/analytics/throughput")
async def finishing_throughput(
    request: Request,
    mode_in: Optional[list[str]] = Query(None),
    bucket_seconds: Optional[float] = Query(None, gt=0, allow_inf_nan=False),
    limit: int = Query(2000, ge=1, le=MAX_SERIES_POINTS),
) -> Response:
    result = await throughput(
        _store(request),
        mode_in=mode_in,
        bucket_seconds=bucket_seconds,
        limit=limit,
        cache=_caches(request).finished,
    )
    return json_response(result)


@_api.get("/analytics/tokens")
async def tokens(request: Request) -> Response:
    """Per-step token accounting (generated, trained, discarded by reason, in flight) of the latest GRPO/RFT run."""
    return json_response(await token_report(_store(request)))


def build_dashboard_router() -> APIRouter:
    """The dashboard's REST routes (stateless: each app carries its store and reward cache)."""
    return _api


class _DashboardFiles(StaticFiles):
    """Static files that browsers revalidate on every load, so an upgraded package is picked up at once."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["Cache-Control"] = "no-cache"
        return response


_ROUTER_LOCK = threading.Lock()
_ROUTER: Optional[APIRouter] = None


def dashboard_router() -> APIRouter:
    """The whole dashboard as one router for `LightningStoreServer(routers=[...])`: endpoints, then pages at `/`.

    Shared by every server of the process: its routes hold no per-app state.
    """
    global _ROUTER
    with _ROUTER_LOCK:
        if _ROUTER is None:
            router = APIRouter()
            router.routes.extend(build_dashboard_router().routes)
            router.mount("/", _DashboardFiles(directory=str(STATIC_DIR), html=True), name="dashboard")
            _ROUTER = router
        return _ROUTER


def mount_dashboard(app: FastAPI) -> None:
    """Add the dashboard to an app serving a store (`app.state.agl_store`); mount it last, its pages are at `/`."""
    app.router.routes.extend(dashboard_router().routes)
