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
from typing import Any, Optional, Union

from opentelemetry.sdk.trace import ReadableSpan

from agentlightning.types import (
    Attempt,
    AttemptedRollout,
    EnqueueRolloutRequest,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    Span,
    TaskInput,
    Worker,
    WorkerStatus,
)
from agentlightning.utils.metrics import MetricsBackend
from agentlightning.utils.server_launcher import LaunchMode, PythonServerLauncher, PythonServerLauncherArgs

from ._http_app import HEALTH_PATH, ServingState, build_store_app
from .base import UNSET, FilterLogic, LightningStore, LightningStoreCapabilities, LightningStoreStatistics, SortOrder
from .client import LightningStoreClient

__all__ = ["LightningStoreServer", "DEFAULT_STORE_PORT", "AUTH_TOKEN_ENV"]

logger = logging.getLogger(__name__)

DEFAULT_STORE_PORT = 4747
AUTH_TOKEN_ENV = "AGL_STORE_TOKEN"


class LightningStoreServer(LightningStore):
    """Serve `store` over HTTP (FastAPI + uvicorn) at `http://{host}:{port}/v1/agl`.

    `host` defaults to 127.0.0.1; `port` None means 4747 and 0 a free port. `launch_mode` is "thread"
    (own event loop in a background thread), "asyncio" (the caller's loop) or "mp" (separate processes,
    only for stores shared across processes). `auth_token` (or env `AGL_STORE_TOKEN`) makes every path
    but `/v1/agl/health` require `Authorization: Bearer <token>`. `tracker` records HTTP metrics.
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
        self.app = build_store_app(
            store,
            self._state,
            auth_token=self.auth_token,
            cors_allow_origins=cors_allow_origins,
            tracker=tracker,
        )
        self._launcher: Optional[PythonServerLauncher] = PythonServerLauncher(self.app, launcher_args)
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
        self.app = None  # type: ignore[assignment]
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

    async def _call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        store = self.store
        if store is None or os.getpid() != self._owner_pid:
            return await getattr(self._remote(), method)(*args, **kwargs)
        loop = self._state.loop
        if loop is not None and self.launcher_args.launch_mode == "thread" and self.is_running():
            if loop is not asyncio.get_running_loop():
                # The store belongs to the serving loop; run the call there rather than share it across threads.
                future = asyncio.run_coroutine_threadsafe(getattr(store, method)(*args, **kwargs), loop)
                return await asyncio.wrap_future(future)
        return await getattr(store, method)(*args, **kwargs)

    # ---- the LightningStore contract ----

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=True)

    def otlp_traces_endpoint(self) -> str:
        return f"{self.endpoint}/v1/traces"

    async def statistics(self) -> LightningStoreStatistics:
        return await self._call("statistics")

    async def start_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
        worker_id: Optional[str] = None,
    ) -> AttemptedRollout:
        return await self._call("start_rollout", input, mode, resources_id, config, metadata, worker_id)

    async def enqueue_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> Rollout:
        return await self._call("enqueue_rollout", input, mode, resources_id, config, metadata)

    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        return await self._call("enqueue_many_rollouts", rollouts)

    async def dequeue_rollout(self, worker_id: Optional[str] = None) -> Optional[AttemptedRollout]:
        return await self._call("dequeue_rollout", worker_id)

    async def dequeue_many_rollouts(self, *, limit: int = 1, worker_id: Optional[str] = None) -> list[AttemptedRollout]:
        return await self._call("dequeue_many_rollouts", limit=limit, worker_id=worker_id)

    async def start_attempt(self, rollout_id: str, worker_id: Optional[str] = None) -> AttemptedRollout:
        return await self._call("start_attempt", rollout_id, worker_id)

    async def query_rollouts(
        self,
        *,
        status_in: Optional[Sequence[RolloutStatus]] = None,
        rollout_id_in: Optional[Sequence[str]] = None,
        rollout_id_contains: Optional[str] = None,
        filter_logic: FilterLogic = "and",
        sort_by: Optional[str] = None,
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
        status: Optional[Sequence[RolloutStatus]] = None,
        rollout_ids: Optional[Sequence[str]] = None,
    ) -> PaginatedResult[Union[Rollout, AttemptedRollout]]:
        return await self._call(
            "query_rollouts",
            status_in=status_in,
            rollout_id_in=rollout_id_in,
            rollout_id_contains=rollout_id_contains,
            filter_logic=filter_logic,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
            status=status,
            rollout_ids=rollout_ids,
        )

    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        return await self._call("get_rollout_by_id", rollout_id)

    async def update_rollout(
        self,
        rollout_id: str,
        input: Any = UNSET,
        mode: Any = UNSET,
        resources_id: Any = UNSET,
        status: Any = UNSET,
        config: Any = UNSET,
        metadata: Any = UNSET,
    ) -> Rollout:
        return await self._call(
            "update_rollout",
            rollout_id,
            input=input,
            mode=mode,
            resources_id=resources_id,
            status=status,
            config=config,
            metadata=metadata,
        )

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        return await self._call("wait_for_rollouts", rollout_ids=rollout_ids, timeout=timeout)

    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: Optional[str] = "sequence_id",
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Attempt]:
        return await self._call(
            "query_attempts", rollout_id, sort_by=sort_by, sort_order=sort_order, limit=limit, offset=offset
        )

    async def get_latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        return await self._call("get_latest_attempt", rollout_id)

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: Any = UNSET,
        worker_id: Any = UNSET,
        last_heartbeat_time: Any = UNSET,
        metadata: Any = UNSET,
    ) -> Attempt:
        return await self._call(
            "update_attempt",
            rollout_id,
            attempt_id,
            status=status,
            worker_id=worker_id,
            last_heartbeat_time=last_heartbeat_time,
            metadata=metadata,
        )

    async def add_span(self, span: Span) -> Optional[Span]:
        return await self._call("add_span", span)

    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        return await self._call("add_many_spans", spans)

    async def add_otel_span(
        self,
        rollout_id: str,
        attempt_id: str,
        readable_span: ReadableSpan,
        sequence_id: Optional[int] = None,
    ) -> Optional[Span]:
        return await self._call("add_otel_span", rollout_id, attempt_id, readable_span, sequence_id)

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        return await self._call("get_next_span_sequence_id", rollout_id, attempt_id)

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        return await self._call("get_many_span_sequence_ids", rollout_attempt_ids)

    async def query_spans(
        self,
        rollout_id: str,
        attempt_id: Optional[str] = None,
        *,
        trace_id: Optional[str] = None,
        trace_id_contains: Optional[str] = None,
        span_id: Optional[str] = None,
        span_id_contains: Optional[str] = None,
        parent_id: Optional[str] = None,
        parent_id_contains: Optional[str] = None,
        name: Optional[str] = None,
        name_contains: Optional[str] = None,
        filter_logic: FilterLogic = "and",
        limit: int = -1,
        offset: int = 0,
        sort_by: Optional[str] = "sequence_id",
        sort_order: SortOrder = "asc",
    ) -> PaginatedResult[Span]:
        return await self._call(
            "query_spans",
            rollout_id,
            attempt_id,
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
        )

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        return await self._call("add_resources", resources)

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        return await self._call("update_resources", resources_id, resources)

    async def get_resources_by_id(self, resources_id: str) -> Optional[ResourcesUpdate]:
        return await self._call("get_resources_by_id", resources_id)

    async def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        return await self._call("get_latest_resources")

    async def query_resources(
        self,
        *,
        resources_id: Optional[str] = None,
        resources_id_contains: Optional[str] = None,
        sort_by: Optional[str] = None,
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[ResourcesUpdate]:
        return await self._call(
            "query_resources",
            resources_id=resources_id,
            resources_id_contains=resources_id_contains,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        )

    async def query_workers(
        self,
        *,
        status_in: Optional[Sequence[WorkerStatus]] = None,
        worker_id_contains: Optional[str] = None,
        filter_logic: FilterLogic = "and",
        sort_by: Optional[str] = None,
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Worker]:
        return await self._call(
            "query_workers",
            status_in=status_in,
            worker_id_contains=worker_id_contains,
            filter_logic=filter_logic,
            sort_by=sort_by,
            sort_order=sort_order,
            limit=limit,
            offset=offset,
        )

    async def get_worker_by_id(self, worker_id: str) -> Optional[Worker]:
        return await self._call("get_worker_by_id", worker_id)

    async def update_worker(self, worker_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        return await self._call("update_worker", worker_id, heartbeat_stats=heartbeat_stats)
