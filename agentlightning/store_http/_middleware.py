"""ASGI middlewares of the store server: body size limit, bearer-token auth and HTTP metrics, plus the Prometheus app."""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from agentlightning.utils.metrics import MetricsBackend

from .errors import HTTPError, error_body
from .limits import DEFAULT_MAX_BODY_SIZE

__all__ = [
    "DEFAULT_MAX_BODY_SIZE",
    "BodySizeLimitMiddleware",
    "BearerAuthMiddleware",
    "HttpMetricsMiddleware",
    "prometheus_app",
]


async def _send_json(send: Send, status: int, body: bytes, *extra_headers: tuple[bytes, bytes]) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra_headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class BodySizeLimitMiddleware:
    """Pure ASGI middleware answering 413 to a request body over `max_body_size` bytes, before it is read.

    A declared `Content-Length` over the limit is refused at once; a chunked body is counted as it
    arrives and refused once past the limit, so the server never holds more than the limit per request.
    """

    def __init__(self, app: ASGIApp, max_body_size: int) -> None:
        self.app = app
        self.max_body_size = max_body_size

    def _message(self, size: str) -> str:
        return (
            f"request body of {size} is over this store server's limit of {self.max_body_size} bytes; send less "
            "per request (LightningStoreClient splits span batches itself) or raise the limit with "
            "`agl store --max-body-size` / LightningStoreServer(max_body_size=...)"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope["headers"]:
            if key == b"content-length":
                if value.isdigit() and int(value) > self.max_body_size:
                    await _send_json(send, 413, error_body(self._message(f"{int(value)} bytes"), "PayloadTooLarge"))
                    return
                break
        received = 0

        async def limited_receive() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_size:
                    raise HTTPError(413, self._message(f"more than {received} bytes"), "PayloadTooLarge")
            return message

        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except HTTPError as exc:  # raised while a route outside the store's error handling read the body
            if started or exc.status != 413:
                raise
            await _send_json(send, 413, error_body(exc.detail, exc.error_type))


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
        tracker.register_counter("agl.http.total", ("method", "path", "status"), "HTTP requests served")
        tracker.register_histogram("agl.http.latency", ("method", "path", "status"), None, "HTTP latency (s)")

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
            self.tracker.inc_counter("agl.http.total", 1.0, labels)
            self.tracker.observe_histogram("agl.http.latency", time.perf_counter() - start, labels)


def prometheus_app(registry: Any) -> ASGIApp:
    import os

    import prometheus_client

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return prometheus_client.make_asgi_app(registry=registry)
