"""The HTTP transport under `LightningStoreClient`: one aiohttp session per event loop, retries, idempotency keys.

One aiohttp session (with its connection pool) per event loop, created on first use. Transport
errors, 5xx and 408 are retried within a time budget (see `retry`), long enough to ride out a server
restart; other 4xx raise at once with the server's message, as `ValueError` / `KeyError` /
`PermissionError` like an in-process store would. Every try of one POST carries the same
`Idempotency-Key`, so a retry whose first answer was lost is replayed by the server, not redone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Optional, TypeVar

import aiohttp
from pydantic import TypeAdapter

from agentlightning.web.limits import DEFAULT_MAX_BODY_SIZE

from ._client_endpoints import _ANY, _JSON_HEADERS
from ._idempotency import IDEMPOTENCY_KEY_HEADER
from ._resources_hint import ResourcesHints
from .errors import (
    NOT_FOUND_ERROR_TYPE,
    LightningStoreNotFoundError,
    LightningStoreServerError,
    LightningStoreUnavailableError,
    exception_from_response,
)
from .retry import RETRY_BUDGET_ENV, RetryBackoff, retry_budget_from_env

__all__ = ["API_PATH", "AUTH_TOKEN_ENV", "TRANSPORT_ERRORS", "StoreTransport"]

# Logged under the client's name: these are the client's retries, and log filters name that logger.
logger = logging.getLogger("agentlightning.store_http.client")

T = TypeVar("T")

AUTH_TOKEN_ENV = "AGL_STORE_TOKEN"
API_PATH = "/v1/agl"

TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    asyncio.TimeoutError,
    OSError,
)


class StoreTransport:
    """Requests to the store server's API at `server_address`, with the client's retry rules.

    The configuration (`retry_budget`, `retry_delays`, `health_retry_delays`, timeouts, `auth_token`,
    `max_body_size`) is described on `LightningStoreClient`, which is this plus the store contract.
    Pickling keeps the configuration only; sessions are opened again on first use.
    """

    def __init__(
        self,
        server_address: str,
        *,
        retry_budget: Optional[float] = None,
        retry_delays: Optional[Sequence[float]] = None,
        health_retry_delays: Sequence[float] = (),
        request_timeout: float = 30.0,
        connection_timeout: float = 5.0,
        auth_token: Optional[str] = None,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    ) -> None:
        root = server_address.rstrip("/")
        if root.endswith(API_PATH):
            root = root[: -len(API_PATH)]
        if not root.startswith(("http://", "https://")):
            raise ValueError(
                f"server_address must be an http(s) URL like 'http://127.0.0.1:4747', got {server_address!r}"
            )
        self.server_root = root
        self.retry_budget = retry_budget_from_env() if retry_budget is None else float(retry_budget)
        if not self.retry_budget >= 0:
            raise ValueError(f"retry_budget must be >= 0 seconds, got {retry_budget!r}")
        self.retry_delays: Optional[tuple[float, ...]] = None if retry_delays is None else tuple(retry_delays)
        self.health_retry_delays: tuple[float, ...] = tuple(health_retry_delays)
        self.max_body_size = max_body_size
        self.request_timeout = request_timeout
        self.connection_timeout = connection_timeout
        self.auth_token: Optional[str] = auth_token or os.environ.get(AUTH_TOKEN_ENV) or None
        self._init_runtime()

    @property
    def server_address(self) -> str:
        """The API base URL, e.g. `http://127.0.0.1:4747/v1/agl`."""
        return self.server_root + API_PATH

    def _init_runtime(self) -> None:
        self._api = self.server_root + API_PATH
        self._health_url = self._api + "/health"
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._sessions_lock = threading.Lock()
        self._timeout = aiohttp.ClientTimeout(total=self.request_timeout, sock_connect=self.connection_timeout)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "server_root": self.server_root,
            "retry_budget": self.retry_budget,
            "retry_delays": self.retry_delays,
            "health_retry_delays": self.health_retry_delays,
            "request_timeout": self.request_timeout,
            "max_body_size": self.max_body_size,
            "connection_timeout": self.connection_timeout,
            "auth_token": self.auth_token,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)
        self._init_runtime()

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is not None and not session.closed:
            return session
        with self._sessions_lock:
            for stale in [lp for lp in self._sessions if lp.is_closed()]:
                del self._sessions[stale]
            headers = {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token else None
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256, keepalive_timeout=30.0),
                timeout=self._timeout,
                headers=headers,
            )
            self._sessions[loop] = session
            return session

    async def close(self) -> None:
        """Close every HTTP session: the running loop's now, those of other running loops on their loops.

        A session whose loop is already closed cannot be closed any more; close it first with
        `close_loop_resources()` on that loop.
        """
        with self._sessions_lock:
            sessions, self._sessions = self._sessions, {}
        current = asyncio.get_running_loop()
        elsewhere: list[asyncio.Future[None]] = []
        for loop, session in sessions.items():
            if session.closed:
                continue
            if loop is current:
                await session.close()
            elif loop.is_running():
                elsewhere.append(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(session.close(), loop)))
        if elsewhere:
            # Bounded: a loop that stopped meanwhile never runs the close.
            done, _ = await asyncio.wait(elsewhere, timeout=self.connection_timeout)
            for future in done:
                if not future.cancelled() and future.exception() is not None:
                    logger.debug("closing an HTTP session on another loop failed: %r", future.exception())

    async def close_loop_resources(self) -> None:
        """Close the HTTP session of the running event loop only (call before closing a loop you created)."""
        loop = asyncio.get_running_loop()
        with self._sessions_lock:
            session = self._sessions.pop(loop, None)
        if session is not None and not session.closed:
            await session.close()

    async def _probe_health(self) -> bool:
        """Whether `/v1/agl/health` answers, trying again after each of `health_retry_delays`."""
        timeout = aiohttp.ClientTimeout(total=self.connection_timeout)
        for attempt in range(len(self.health_retry_delays) + 1):
            try:
                async with self._session().get(self._health_url, timeout=timeout) as response:
                    if response.status == 200:
                        return True
            except TRANSPORT_ERRORS:
                pass
            if attempt < len(self.health_retry_delays):
                await asyncio.sleep(self.health_retry_delays[attempt])
        return False

    async def _request(
        self,
        method: str,
        path: str,
        payload: Any = None,
        *,
        params: Optional[Mapping[str, Any]] = None,
        timeout: Optional[aiohttp.ClientTimeout] = None,
        none_if_missing: bool = False,
        response_headers: Optional[dict[str, str]] = None,
        request_headers: Optional[Mapping[str, str]] = None,
        raw_body: Optional[bytes] = None,
    ) -> Optional[bytes]:
        """Send one API request with the retry rules; returns the body, or None for a 'not found' answer."""
        if "//" in path or path.endswith("/"):
            raise ValueError(f"empty id in request {method} {path!r}; ids must be non-empty strings")
        ResourcesHints.drop()
        url = self._api + path
        data = _ANY.dump_json(payload, serialize_as_any=True) if payload is not None else raw_body
        headers = dict(request_headers or (_JSON_HEADERS if data is not None else {}))
        if method == "POST":  # one key for every try of this call: the server replays instead of redoing it
            headers[IDEMPOTENCY_KEY_HEADER] = uuid.uuid4().hex
        attempt = 0
        started = time.monotonic()
        while True:
            try:
                async with self._session().request(
                    method,
                    url,
                    data=data,
                    params=params,
                    headers=headers,
                    timeout=timeout or self._timeout,
                    allow_redirects=False,
                ) as response:
                    status = response.status
                    body = await response.read()
                    if response_headers is not None:
                        response_headers.update((k.lower(), v) for k, v in response.headers.items())
            except TRANSPORT_ERRORS as exc:
                error: Exception = exc
                reason = f"{type(exc).__name__}: {exc}"
            else:
                if status < 400:
                    return body
                error = exception_from_response(status, body, url, method)
                if none_if_missing and isinstance(error, LightningStoreNotFoundError):
                    if error.error_type == NOT_FOUND_ERROR_TYPE:
                        return None
                if not ((status >= 500 and status != 501) or status == 408):
                    raise error
                reason = f"HTTP {status}"
            elapsed = time.monotonic() - started
            delay = self._retry_delay(attempt, elapsed)
            if delay is None:
                raise self._gave_up(error, method, url, attempt + 1, elapsed)
            if self.health_retry_delays and not await self._probe_health():
                logger.warning("%s %s failed (%s) and the store server is not healthy; giving up", method, url, reason)
                raise self._gave_up(error, method, url, attempt + 1, time.monotonic() - started)
            attempt += 1
            if self.retry_delays is not None:
                logger.info(
                    "%s %s failed (%s); retry %d/%d in %.2fs",
                    method,
                    url,
                    reason,
                    attempt,
                    len(self.retry_delays),
                    delay,
                )
            else:
                logger.info(
                    "%s %s failed (%s); retry %d in %.2fs (%.0fs left of the %.0fs retry budget)",
                    method,
                    url,
                    reason,
                    attempt,
                    delay,
                    self.retry_budget - elapsed,
                    self.retry_budget,
                )
            await asyncio.sleep(delay)

    def _retry_delay(self, retry: int, elapsed: float) -> Optional[float]:
        """Seconds before retry number `retry`, or None to give up: the explicit delays, else the budget's backoff."""
        if self.retry_delays is not None:
            return self.retry_delays[retry] if retry < len(self.retry_delays) else None
        return RetryBackoff(budget=self.retry_budget).delay(retry, elapsed)

    def _gave_up(self, error: Exception, method: str, url: str, tries: int, elapsed: float) -> Exception:
        """The error to raise once retries are over: a transport failure becomes one that names the server."""
        if isinstance(error, LightningStoreServerError):
            return error
        unavailable = LightningStoreUnavailableError(
            f"store server at {self.server_root} unreachable: {method} {url} failed {tries} time(s) over "
            f"{elapsed:.1f}s ({type(error).__name__}: {error}); is it running? The client retries for "
            f"retry_budget={self.retry_budget:g}s (env {RETRY_BUDGET_ENV})"
        )
        unavailable.__cause__ = error
        return unavailable

    async def _call(self, adapter: TypeAdapter[T], method: str, path: str, payload: Any = None, **kwargs: Any) -> T:
        body = await self._request(method, path, payload, **kwargs)
        assert body is not None
        return adapter.validate_json(body)
