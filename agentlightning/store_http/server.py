"""`LightningStoreServer`: serve a store over HTTP, and stay usable as a store from any process.

In the process that created it, the server delegates each call to the wrapped store (on the serving
event loop when the server runs in a thread, so the store only ever sees one loop). Pickled into
another process (a runner), the same object talks to the server through a `LightningStoreClient`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Sequence
from typing import Any, Optional

from fastapi import APIRouter, FastAPI

from agentlightning.store.base import LightningStore, LightningStoreCapabilities
from agentlightning.store.forwarding import ForwardingLightningStore
from agentlightning.tracking.metrics import MetricsBackend
from agentlightning.web.launcher import LaunchMode, PythonServerLauncher, PythonServerLauncherArgs
from agentlightning.web.limits import DEFAULT_MAX_BODY_SIZE

from .app import HEALTH_PATH, ServingState, build_store_app
from .client import AUTH_TOKEN_ENV, LightningStoreClient

__all__ = ["LightningStoreServer", "DEFAULT_STORE_PORT", "AUTH_TOKEN_ENV"]

logger = logging.getLogger(__name__)

DEFAULT_STORE_PORT = 4747


class LightningStoreServer(ForwardingLightningStore):
    """Serve `store` over HTTP (FastAPI + uvicorn) at `http://{host}:{port}/v1/agl`.

    `host` defaults to 127.0.0.1; `port` None means 4747 and 0 a free port. `launch_mode` is "thread"
    (own event loop in a background thread), "asyncio" (the caller's loop) or "mp" (separate processes,
    only for stores shared across processes). `auth_token` (or env `AGL_STORE_TOKEN`) makes every path
    but `/v1/agl/health` require `Authorization: Bearer <token>`. `tracker` records HTTP metrics.
    `routers` are served next to the store API (the dashboard is one: `dashboard_router()`); the
    pages an extra router mounts at `/` are public, its API routes need the token like the rest. With a
    token, the OpenAPI document and pages (/openapi.json, /docs, /redoc) need it too unless
    `public_docs=True`. Request bodies over `max_body_size` bytes (default 16 MiB) are answered 413.
    Browsers cannot use the server from other web pages: requests with an `Origin` other than the server's
    own or `cors_allow_origins` are answered 403, and so are, without a token, requests naming the server
    by a `Host` other than an IP address, localhost, this machine's name or one of `allowed_hosts` (DNS
    rebinding; `["*"]` allows any name).
    """

    def __init__(
        self,
        store: LightningStore,
        host: Optional[str] = None,
        port: Optional[int] = None,
        cors_allow_origins: Optional[Sequence[str]] = None,
        launch_mode: LaunchMode = "thread",
        launcher_args: Optional[PythonServerLauncherArgs] = None,
        n_workers: int = 1,
        tracker: Optional[MetricsBackend] = None,
        auth_token: Optional[str] = None,
        routers: Sequence[APIRouter] = (),
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        public_docs: bool = False,
        allowed_hosts: Sequence[str] = (),
    ) -> None:
        if isinstance(store, LightningStoreServer):
            raise ValueError("cannot serve a LightningStoreServer again; pass the store it wraps")
        if port is None and launcher_args is None:
            logger.warning("no port given for the store server; using the default %d", DEFAULT_STORE_PORT)
            port = DEFAULT_STORE_PORT
        if launcher_args is None:
            launcher_args = PythonServerLauncherArgs(
                port=port, host=host or "127.0.0.1", launch_mode=launch_mode, n_workers=n_workers
            )
        if launcher_args.healthcheck_url is None:
            launcher_args = dataclasses.replace(launcher_args, healthcheck_url=HEALTH_PATH)
        if launcher_args.launch_mode == "mp" and not store.capabilities.get("zero_copy", False):
            raise ValueError(
                f"launch_mode='mp' serves the store from other processes, which needs a store shared across "
                f"processes (capabilities['zero_copy']); {type(store).__name__} is not. Use launch_mode='thread' "
                "or 'asyncio', or a SQLite/PostgreSQL store."
            )
        self.store: Optional[LightningStore] = store
        self.launcher_args = launcher_args
        self.auth_token: Optional[str] = auth_token or os.environ.get(AUTH_TOKEN_ENV) or None
        self._state = ServingState()
        app = build_store_app(
            store,
            self._state,
            auth_token=self.auth_token,
            cors_allow_origins=cors_allow_origins,
            tracker=tracker,
            routers=routers,
            max_body_size=max_body_size,
            public_docs=public_docs,
            allowed_hosts=allowed_hosts,
            shared_idempotency=launcher_args.launch_mode == "mp",
        )
        self._launcher: Optional[PythonServerLauncher] = PythonServerLauncher(app, launcher_args)
        self.app: Optional[FastAPI] = app  # None in a process that received this server pickled
        self._endpoint: Optional[str] = None
        if launcher_args.port:
            self._endpoint = self._launcher.access_endpoint_for(launcher_args.port)
        self._owner_pid = os.getpid()
        self._client: Optional[LightningStoreClient] = None

    # ---- lifecycle ----

    @property
    def endpoint(self) -> str:
        """Base URL of the server, e.g. `http://127.0.0.1:4747` (known after `start()` for port 0)."""
        if self._endpoint is None:
            raise RuntimeError("the store server picks its port on start(); call start() before reading endpoint")
        return self._endpoint

    @property
    def server_launcher(self) -> Optional[PythonServerLauncher]:
        """The launcher serving the app (None in a process that received this server pickled)."""
        return self._launcher

    @property
    def port(self) -> Optional[int]:
        return self._launcher.port if self._launcher is not None else None

    def is_running(self) -> bool:
        return self._launcher is not None and self._launcher.is_running()

    async def start(self) -> None:
        """Start serving; returns once `/v1/agl/health` answers."""
        launcher = self._require_owner("start")
        await launcher.start()
        self._endpoint = launcher.access_endpoint

    async def stop(self) -> None:
        """Stop serving (pending long-polls answer at once). Idempotent."""
        launcher = self._require_owner("stop")
        self._state.request_shutdown()
        await launcher.stop()

    async def run_forever(self) -> None:
        """Serve until SIGINT/SIGTERM or cancellation."""
        launcher = self._require_owner("run_forever")
        if not launcher.is_running():
            await self.start()
        try:
            await launcher.run_forever()
        finally:
            self._state.request_shutdown()

    async def close(self) -> None:
        """Stop serving (in the owner process) and close the internal client (elsewhere)."""
        if self._is_owner() and self._launcher is not None:
            await self.stop()
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def close_loop_resources(self) -> None:
        """Close the internal client's HTTP session of the running event loop (in runner processes)."""
        if self._client is not None:
            await self._client.close_loop_resources()

    # ---- pickling: other processes reach the server over HTTP ----

    def __getstate__(self) -> dict[str, Any]:
        return {
            "_endpoint": self._endpoint,
            "_owner_pid": self._owner_pid,
            "auth_token": self.auth_token,
            "launcher_args": self.launcher_args,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._endpoint = state["_endpoint"]
        self._owner_pid = state["_owner_pid"]
        self.auth_token = state["auth_token"]
        self.launcher_args = state["launcher_args"]
        self.store = None
        self.app = None
        self._launcher = None
        self._state = ServingState()
        self._client = None

    def _is_owner(self) -> bool:
        return self.store is not None and os.getpid() == self._owner_pid

    def _require_owner(self, action: str) -> PythonServerLauncher:
        if not self._is_owner() or self._launcher is None:
            raise RuntimeError(
                f"cannot {action} the store server from process {os.getpid()}: only the process that created it "
                f"(pid {self._owner_pid}) controls it"
            )
        return self._launcher

    def _remote(self) -> LightningStoreClient:
        if self._client is None:
            if self._endpoint is None:
                raise RuntimeError(
                    "this LightningStoreServer was pickled before it knew its port; start() it before handing it "
                    "to other processes"
                )
            self._client = LightningStoreClient(self._endpoint, auth_token=self.auth_token)
        return self._client

    async def _forward(self, method: str, arguments: dict[str, Any]) -> Any:
        store = self.store
        if store is None or os.getpid() != self._owner_pid:
            return await getattr(self._remote(), method)(**arguments)
        loop = self._state.loop
        if loop is not None and self.launcher_args.launch_mode == "thread" and self.is_running():
            if loop is not asyncio.get_running_loop():
                # The store belongs to the serving loop; run the call there rather than share it across threads.
                future = asyncio.run_coroutine_threadsafe(getattr(store, method)(**arguments), loop)
                return await asyncio.wrap_future(future)
        return await getattr(store, method)(**arguments)

    # ---- the LightningStore contract ----

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=True)

    def otlp_traces_endpoint(self) -> str:
        return f"{self.endpoint}/v1/traces"
