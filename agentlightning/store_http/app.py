"""The FastAPI app that exposes a `LightningStore` over HTTP (REST under /v1/agl, OTLP under /v1).

Every route answers errors as JSON (see `errors`); nothing a client sends can stop the server. The
routes live in `routes/` (one router per noun), request bodies in `bodies`, auth and metrics in
`_middleware`. Extra routers (the dashboard) are added by whoever builds the app.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Optional

from fastapi import APIRouter, FastAPI
from starlette.routing import BaseRoute, Mount

from agentlightning.store.base import LightningStore
from agentlightning.tracking.metrics import MetricsBackend, find_prometheus_backend
from agentlightning.web.browser_guard import BrowserGuardMiddleware, default_allowed_hosts

from ._idempotency import IdempotencyMiddleware
from ._middleware import (
    DEFAULT_MAX_BODY_SIZE,
    BearerAuthMiddleware,
    BodySizeLimitMiddleware,
    HttpMetricsMiddleware,
    MethodNotAllowedMiddleware,
    prometheus_app,
)
from .context import API_PREFIX, HEALTH_PATH, ServingState
from .openapi import store_openapi
from .routes import WAIT_CAP_SECONDS, WAIT_COMPLETE_HEADER, store_routers

__all__ = ["API_PREFIX", "HEALTH_PATH", "WAIT_CAP_SECONDS", "WAIT_COMPLETE_HEADER", "ServingState", "build_store_app"]

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
    ("POST", "/rollouts/{rollout_id}/attempts/{attempt_id}/finish"),
    ("POST", "/workers/search"),
    ("POST", "/workers/{worker_id}"),
    ("GET", "/resources/latest"),
    ("GET", "/resources/{resources_id}"),
    ("POST", "/waits/rollouts"),
)


def _hot_routes_first(routes: list[BaseRoute]) -> list[BaseRoute]:
    rank = {(method, API_PREFIX + path): i for i, (method, path) in enumerate(_HOT_ROUTES)}

    def key(item: tuple[int, Any]) -> tuple[int, int]:
        index, route = item
        methods = getattr(route, "methods", None) or set()
        hot = min((rank[(m, route.path)] for m in methods if (m, route.path) in rank), default=None)
        return (0, hot) if hot is not None else (1, index)

    return [route for _, route in sorted(enumerate(routes), key=key)]


logger = logging.getLogger(__name__)

_STORE_ROUTES: Optional[list[BaseRoute]] = None


def _store_routes() -> list[BaseRoute]:
    global _STORE_ROUTES
    if _STORE_ROUTES is None:
        _STORE_ROUTES = _hot_routes_first([route for router in store_routers() for route in router.routes])
    return _STORE_ROUTES


def _serves_pages(routers: Sequence[APIRouter]) -> bool:
    """Whether an extra router mounts pages at `/` (static files, which hold no data)."""
    return any(isinstance(route, Mount) and route.path == "" for router in routers for route in router.routes)


def build_store_app(
    store: LightningStore,
    state: ServingState,
    *,
    auth_token: Optional[str] = None,
    cors_allow_origins: Optional[Sequence[str]] = None,
    tracker: Optional[MetricsBackend] = None,
    routers: Sequence[APIRouter] = (),
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    public_docs: bool = False,
    allowed_hosts: Sequence[str] = (),
    shared_idempotency: bool = False,
) -> FastAPI:
    """The complete app: REST API, OTLP ingestion, optional Prometheus metrics, then `routers` (in order).

    With `auth_token`, the OpenAPI document and its pages (/openapi.json, /docs, /redoc) need the token
    too unless `public_docs`; request bodies over `max_body_size` bytes are answered 413. Requests a web
    page made a browser send are answered 403 (see `web.browser_guard`): from origins other than the server's
    own and `cors_allow_origins`, and, without a token, for `Host` names other than IP addresses,
    localhost, this machine's name and `allowed_hosts` (`"*"` allows any). With `shared_idempotency`
    (several server processes), answers to retried POSTs are kept in the store's database
    (`store.idempotency_ledger()`), not in this process.
    """
    if max_body_size <= 0:
        raise ValueError(f"max_body_size must be a positive number of bytes, got {max_body_size}")

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
    app.openapi = lambda: store_openapi(app)  # type: ignore[method-assign]
    app.state.agl_store = store
    app.state.agl_serving = state
    # Route objects hold no per-app state (the store comes from `request.app.state`), so every app shares
    # them; adding them directly (not via include_router) also keeps per-request routing overhead minimal.
    app.router.routes.extend(_store_routes())

    prometheus = find_prometheus_backend(tracker)
    if prometheus is not None:
        app.mount("/v1/prometheus", prometheus_app(prometheus.registry))

    for router in routers:  # last: a router may mount pages at "/"
        app.router.routes.extend(router.routes)
    serves_pages = _serves_pages(routers)
    docs_paths = {app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url}

    def public(path: str) -> bool:
        if path == HEALTH_PATH:
            return True
        if path in docs_paths:
            return public_docs
        # Pages mounted at "/" hold no data; the API calls they make still need the token.
        return serves_pages and not path.startswith("/v1/")

    app.add_middleware(MethodNotAllowedMiddleware, routes=list(app.router.routes))  # type: ignore[arg-type]
    # Innermost: an answer is remembered or replayed only for a request that passed auth and the size limit.
    ledger = store.idempotency_ledger() if shared_idempotency else None
    if shared_idempotency and ledger is None:
        logger.warning(
            "%s keeps no idempotency ledger: each server process remembers its own answers, so a retried "
            "request reaching another process is done again",
            type(store).__name__,
        )
    app.add_middleware(IdempotencyMiddleware, ledger=ledger)  # type: ignore[arg-type]
    app.add_middleware(BodySizeLimitMiddleware, max_body_size=max_body_size)  # type: ignore[arg-type]
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
    hosts = None if auth_token or "*" in allowed_hosts else default_allowed_hosts(allowed_hosts)
    app.add_middleware(
        BrowserGuardMiddleware,  # type: ignore[arg-type]
        allowed_hosts=hosts,
        allowed_origins=tuple(cors_allow_origins or ()),
        hint="`agl store --allowed-host NAME` / LightningStoreServer(allowed_hosts=[...]), or set an auth token",
    )
    if tracker is not None:
        app.add_middleware(HttpMetricsMiddleware, tracker=tracker)  # type: ignore[arg-type]
    return app
