"""ASGI middlewares of the store server: body size limit, bearer-token auth and HTTP metrics, plus the Prometheus app."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Sequence
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from agentlightning.tracking.metrics import MetricsBackend
from agentlightning.web.body_limit import BodySizeLimitMiddleware as GenericBodySizeLimit
from agentlightning.web.errors import detail_error_body
from agentlightning.web.limits import DEFAULT_MAX_BODY_SIZE

from .errors import HTTPError, error_body

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "BodySizeLimitMiddleware",
    "BearerAuthMiddleware",
    "HttpMetricsMiddleware",
    "MethodNotAllowedMiddleware",
    "prometheus_app",
]


async def _send_json(send: Send, status: int, body: bytes, *extra_headers: tuple[bytes, bytes]) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra_headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodySizeLimitMiddleware(GenericBodySizeLimit):
    """413 to a request body over `max_body_size` bytes (see `web.body_limit`), with the store's error shape."""

    def __init__(self, app: ASGIApp, max_body_size: int) -> None:
        hint = (
            "send less per request (LightningStoreClient splits span batches itself) or raise the limit with "
            "`agl store --max-body-size` / LightningStoreServer(max_body_size=...)"
        )
        super().__init__(app, max_body_size, hint=hint, error_shape=_payload_too_large)

    def too_large(self, size: str) -> Exception:
        # An HTTPError: the store's routes answer it themselves (413) when they are the ones reading.
        return HTTPError(413, self.message(size), "PayloadTooLarge")

    def is_too_large(self, exc: BaseException) -> bool:
        return isinstance(exc, HTTPError) and exc.status == 413


def _payload_too_large(status: int, message: str, error_type: str) -> bytes:
    return detail_error_body(status, message, "PayloadTooLarge")


class BearerAuthMiddleware:
    """Pure ASGI middleware requiring `Authorization: Bearer <token>` except on public paths.

    The scheme name is case-insensitive (RFC 7235): `bearer <token>` is accepted too.
    """

    def __init__(self, app: ASGIApp, token: str, public: Callable[[str], bool]) -> None:
        self.app = app
        self.expected = token.encode()
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.public(scope["path"]):
            await self.app(scope, receive, send)
            return
        provided = b""
        for key, value in scope["headers"]:
            if key == b"authorization":
                provided = value
                break
        scheme, _, credentials = provided.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(credentials.strip(), self.expected):
            await self.app(scope, receive, send)
            return
        reason = "missing" if not provided else "invalid"
        body = error_body(
            f"{reason} bearer token: this store server requires 'Authorization: Bearer <token>' "
            "(the token given to `agl store --auth-token` or AGL_STORE_TOKEN; clients pass auth_token= or set "
            "AGL_STORE_TOKEN)",
            "AuthenticationError",
        )
        await _send_json(send, 401, body, (b"www-authenticate", b"Bearer"))


class HttpMetricsMiddleware:
    """Pure ASGI middleware recording `agl.http.total` and `agl.http.latency` per route template."""

    def __init__(self, app: ASGIApp, tracker: MetricsBackend) -> None:
        self.app = app
        self.tracker = tracker
        tracker.register_counter("agl.http.total", ("method", "path", "status"), description="HTTP requests served")
        tracker.register_histogram("agl.http.latency", ("method", "path", "status"), description="HTTP latency (s)")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            labels = {"method": scope["method"], "path": path, "status": str(status)}
            # Awaited: v0.3-style backends implement these as coroutines; ours return an awaitable already done.
            await self.tracker.inc_counter("agl.http.total", 1.0, labels)
            await self.tracker.observe_histogram("agl.http.latency", time.perf_counter() - start, labels)


def prometheus_app(registry: Any) -> ASGIApp:
    import os

    import prometheus_client

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return prometheus_client.make_asgi_app(registry=registry)


class MethodNotAllowedMiddleware:
    """Pure ASGI middleware answering 405 with an exact `Allow` header for API paths served by other methods.

    Without it a request such as `PUT /v1/agl/rollouts` falls through to the pages mounted at `/` (which
    answer `Allow: GET, HEAD`), or Starlette reports the methods of one of the path's routes only. A literal
    path (`/v1/agl/rollouts/search`, `/v1/agl/resources/latest`) allows its own methods only: `GET
    /v1/agl/rollouts/search` is a 405, not a lookup of a rollout named "search".
    """

    def __init__(self, app: ASGIApp, routes: Sequence[Any], prefix: str = "/v1/") -> None:
        self.app = app
        self.prefix = prefix
        self.static: dict[str, set[str]] = {}
        self.templated: list[tuple[Any, set[str]]] = []
        for route in routes:
            path, methods = getattr(route, "path", ""), getattr(route, "methods", None)
            if not methods or not path.startswith(prefix):
                continue
            if "{" in path:
                self.templated.append((route.path_regex, set(methods)))
            else:
                self.static.setdefault(path, set()).update(methods)

    def _allowed(self, path: str) -> set[str]:
        literal = self.static.get(path)
        if literal is not None:  # a literal path (".../search", ".../latest") is not also an id of a template
            return set(literal)
        allowed: set[str] = set()
        for regex, methods in self.templated:
            if regex.match(path):
                allowed |= methods
        return allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self.prefix):
            allowed = self._allowed(scope["path"])
            if allowed and scope["method"] not in allowed:
                listed = ", ".join(sorted(allowed))
                body = error_body(
                    f"method {scope['method']} is not allowed on {scope['path']}; use {listed}", "MethodNotAllowed"
                )
                await _send_json(send, 405, body, (b"allow", listed.encode()))
                return
        await self.app(scope, receive, send)
