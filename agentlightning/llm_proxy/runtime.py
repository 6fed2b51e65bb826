"""`ProxyRuntime`: what the serving process needs to forward and record calls.

Configuration (model router, store, middlewares, callbacks, retries) is set by `LLMProxy`; the HTTP client
and the span exporter are created in the serving event loop at startup (in the child process in `mp`
mode), so connection pools never cross loops or processes.

Backends are called with one shared `aiohttp.ClientSession` (pooled keep-alive connections). httpx was
measured here at about 1 ms of CPU per forwarded request against 0.2 ms for aiohttp, a large part of
the proxy's latency budget.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Collection, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, Protocol

import aiohttp

from agentlightning.web.pause import PauseGate

from .call import ProxyCall
from .exporter import LightningSpanExporter
from .models import ModelRouter, apply_litellm_settings

if TYPE_CHECKING:
    from agentlightning.store.base import LightningStore

__all__ = ["ProxyRuntime", "CallHooks", "MiddlewareHooks", "DEFAULT_REQUEST_TIMEOUT_SECONDS"]

logger = logging.getLogger(__name__)

DEFAULT_REQUEST_TIMEOUT_SECONDS = 600.0
CONNECT_TIMEOUT_SECONDS = 10.0


class MiddlewareHooks(Protocol):
    """What the runtime calls on a middleware (`middleware.ProxyMiddleware` is one)."""

    def on_request(self, call: ProxyCall, runtime: ProxyRuntime) -> None: ...

    def on_response(self, call: ProxyCall, runtime: ProxyRuntime) -> None: ...


class CallHooks(Protocol):
    """What the runtime calls on a callback (`callbacks.ProxyCallback` is one)."""

    def on_request(self, call: ProxyCall, runtime: ProxyRuntime) -> None: ...

    async def on_call_end(self, call: ProxyCall, runtime: ProxyRuntime) -> None: ...


def _retrieve_exception(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class ProxyRuntime:
    """Shared state of the proxy app: configuration plus (once started) the HTTP client and span exporter."""

    def __init__(
        self,
        router: ModelRouter,
        store: Optional[LightningStore],
        middlewares: Sequence[MiddlewareHooks],
        callbacks: Sequence[CallHooks],
        *,
        num_retries: int = 0,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_SECONDS,
        max_connections: int = 1024,
        retry_status_codes: Optional[Collection[int]] = None,
        litellm_settings: Optional[Mapping[str, Any]] = None,
        gate: Optional[PauseGate] = None,
        hold_timeout: float = 600.0,
    ) -> None:
        if num_retries < 0:
            raise ValueError(f"num_retries must be >= 0, got {num_retries}")
        self.router = router
        self.store = store
        self.middlewares = list(middlewares)
        self.callbacks = list(callbacks)
        self.num_retries = num_retries
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        # Backend statuses worth another attempt (None: the proxy's default, `forward.RETRYABLE_STATUS_CODES`).
        self.retry_status_codes = frozenset(retry_status_codes) if retry_status_codes is not None else None
        self.litellm_settings = dict(litellm_settings or {})
        # While `gate` is paused (weights changing), new calls wait up to `hold_timeout` s before a 429.
        self.gate = gate
        self.hold_timeout = hold_timeout
        self.client: Optional[aiohttp.ClientSession] = None
        self.exporter: Optional[LightningSpanExporter] = None
        self._background: set[asyncio.Future[Any]] = set()
        self._creator_pid = os.getpid()

    # ---- lifecycle (in the serving loop) ----

    async def startup(self) -> None:
        self.client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.max_connections, keepalive_timeout=60.0),
            timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=CONNECT_TIMEOUT_SECONDS, sock_read=self.request_timeout
            ),
            # HTTP(S)_PROXY and netrc are ignored: aiohttp looks them up in a worker thread on every request
            # (two thread hand-offs per call), and model servers are usually on the local network anyway.
            trust_env=False,
        )
        self.exporter = LightningSpanExporter(self.store) if self.store is not None else None
        if self.litellm_settings:
            apply_litellm_settings(self.litellm_settings)

    async def shutdown(self) -> None:
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        if self.exporter is not None:
            await self.exporter.shutdown()
        if self.client is not None:
            await self.client.close()
        self.client = None
        if self.store is not None and os.getpid() != self._creator_pid:
            # A serving process's own copy of the store (e.g. a store client's HTTP sessions): release it.
            try:
                await self.store.close()
            except Exception:
                logger.debug("closing the LLM proxy's copy of the store failed", exc_info=True)

    def http_client(self) -> aiohttp.ClientSession:
        if self.client is None:
            raise RuntimeError("the LLM proxy app is not started (its lifespan startup did not run)")
        return self.client

    # ---- helpers for middlewares and callbacks ----

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        """Run `coroutine` in the background (awaited on shutdown); returns its task."""
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(_retrieve_exception)
        return task

    def reserve_sequence_id(self, call: ProxyCall) -> None:
        """Start allocating the call's span sequence id (runs while the backend answers)."""
        if self.store is None or call.rollout_id is None or call.attempt_id is None:
            return
        task = asyncio.ensure_future(self.store.get_next_span_sequence_id(call.rollout_id, call.attempt_id))
        task.add_done_callback(_retrieve_exception)
        call.sequence_id_task = task

    async def sequence_id(self, call: ProxyCall) -> int:
        """The call's sequence id (reserved on arrival, or allocated now)."""
        if call.sequence_id_task is not None:
            return await call.sequence_id_task
        if self.store is None or call.rollout_id is None or call.attempt_id is None:
            raise RuntimeError("the call has no rollout attempt or the proxy has no store")
        return await self.store.get_next_span_sequence_id(call.rollout_id, call.attempt_id)

    async def finish(self, call: ProxyCall) -> None:
        """Run the end-of-call hooks; a failing hook is logged and never breaks the response."""
        for middleware in self.middlewares:
            try:
                middleware.on_response(call, self)
            except Exception:
                logger.exception("LLM proxy middleware %s failed in on_response", type(middleware).__name__)
        for callback in self.callbacks:
            try:
                await callback.on_call_end(call, self)
            except Exception:
                logger.exception("LLM proxy callback %s failed in on_call_end", type(callback).__name__)
