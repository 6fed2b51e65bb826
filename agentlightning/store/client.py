"""`LightningStoreClient`: the `LightningStore` contract over HTTP, talking to a `LightningStoreServer`.

One aiohttp session (with its connection pool) per event loop, created on first use. Transport
errors, 5xx and 408 are retried after a health probe; other 4xx raise at once with the server's
message, as `ValueError` / `KeyError` like an in-process store would.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Optional, TypeVar, Union
from urllib.parse import quote

import aiohttp
from pydantic import TypeAdapter

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

from ._arguments import check_wait_timeout, check_worker_id, coerce_config
from ._http_errors import NOT_FOUND_ERROR_TYPE, LightningStoreNotFoundError, exception_from_response
from ._resources_hint import RESOURCES_VERSIONS_HEADER, WANT_RESOURCES_VERSIONS_HEADER, ResourcesHints
from .base import (
    UNSET,
    FilterLogic,
    LightningStore,
    LightningStoreCapabilities,
    LightningStoreStatistics,
    SortOrder,
    is_unset,
)

__all__ = ["LightningStoreClient"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

AUTH_TOKEN_ENV = "AGL_STORE_TOKEN"
API_PATH = "/v1/agl"
WAIT_COMPLETE_HEADER = "X-AGL-Wait-Complete"  # set by the server on each long-poll answer

_TRANSPORT_ERRORS: tuple[type[Exception], ...] = (
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    asyncio.TimeoutError,
    OSError,
)

_ANY: TypeAdapter[Any] = TypeAdapter(Any)
_ROLLOUT: TypeAdapter[Rollout] = TypeAdapter(Rollout)
_ROLLOUTS: TypeAdapter[list[Rollout]] = TypeAdapter(list[Rollout])
_ANY_ROLLOUT: TypeAdapter[Union[AttemptedRollout, Rollout]] = TypeAdapter(Union[AttemptedRollout, Rollout])
_ATTEMPTED: TypeAdapter[AttemptedRollout] = TypeAdapter(AttemptedRollout)
_ATTEMPTED_LIST: TypeAdapter[list[AttemptedRollout]] = TypeAdapter(list[AttemptedRollout])
_ROLLOUT_PAGE: TypeAdapter[PaginatedResult[Union[AttemptedRollout, Rollout]]] = TypeAdapter(
    PaginatedResult[Union[AttemptedRollout, Rollout]]
)
_ATTEMPT: TypeAdapter[Attempt] = TypeAdapter(Attempt)
_ATTEMPT_PAGE: TypeAdapter[PaginatedResult[Attempt]] = TypeAdapter(PaginatedResult[Attempt])
_SPAN: TypeAdapter[Span] = TypeAdapter(Span)
_SPANS: TypeAdapter[list[Span]] = TypeAdapter(list[Span])
_SPAN_PAGE: TypeAdapter[PaginatedResult[Span]] = TypeAdapter(PaginatedResult[Span])
_RESOURCES: TypeAdapter[ResourcesUpdate] = TypeAdapter(ResourcesUpdate)
_RESOURCES_PAGE: TypeAdapter[PaginatedResult[ResourcesUpdate]] = TypeAdapter(PaginatedResult[ResourcesUpdate])
_WORKER: TypeAdapter[Worker] = TypeAdapter(Worker)
_WORKER_PAGE: TypeAdapter[PaginatedResult[Worker]] = TypeAdapter(PaginatedResult[Worker])
_DICT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])

_JSON_HEADERS = {"Content-Type": "application/json"}
_DEQUEUE_HEADERS = {**_JSON_HEADERS, WANT_RESOURCES_VERSIONS_HEADER: "1"}


def _seg(value: str, what: str = "id") -> str:
    """`value` as one URL path segment; an empty id is refused here, as the store would refuse it."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    return quote(value, safe="")


def _given(**fields: Any) -> dict[str, Any]:
    """The fields the caller actually passed (UNSET ones are left out of the request)."""
    return {k: v for k, v in fields.items() if v is not UNSET}


def _list(value: Optional[Sequence[Any]]) -> Optional[list[Any]]:
    return None if value is None else list(value)


def _checked_config(config: Any) -> Any:
    """A config validated here, so values JSON cannot carry (NaN, infinity) fail as they would in process."""
    return None if config is None else coerce_config(config)


class LightningStoreClient(LightningStore):
    """A store living behind `server_address` (e.g. `http://127.0.0.1:4747`).

    Retries follow `retry_delays` (seconds between attempts), each preceded by health probes spaced by
    `health_retry_delays`; a server that never answers the probe ends the retries. Empty tuples disable
    retries / probes. `auth_token` (or env `AGL_STORE_TOKEN`) is sent as a bearer token.
    """

    #: Longest single long-poll of `wait_for_rollouts`; longer waits are several polls.
    wait_poll_seconds: float = 30.0

    def __init__(
        self,
        server_address: str,
        *,
        retry_delays: Sequence[float] = (1.0, 2.0, 5.0),
        health_retry_delays: Sequence[float] = (0.1, 0.2, 0.5),
        request_timeout: float = 30.0,
        connection_timeout: float = 5.0,
        auth_token: Optional[str] = None,
    ) -> None:
        root = server_address.rstrip("/")
        if root.endswith(API_PATH):
            root = root[: -len(API_PATH)]
        if not root.startswith(("http://", "https://")):
            raise ValueError(
                f"server_address must be an http(s) URL like 'http://127.0.0.1:4747', got {server_address!r}"
            )
        self.server_address = root
        self.retry_delays: tuple[float, ...] = tuple(retry_delays)
        self.health_retry_delays: tuple[float, ...] = tuple(health_retry_delays)
        self.request_timeout = request_timeout
        self.connection_timeout = connection_timeout
        self.auth_token: Optional[str] = auth_token or os.environ.get(AUTH_TOKEN_ENV) or None
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._api = self.server_address + API_PATH
        self._health_url = self._api + "/health"
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._sessions_lock = threading.Lock()
        self._dequeue_failing = False
        self._resources = ResourcesHints()
        self._timeout = aiohttp.ClientTimeout(total=self.request_timeout, sock_connect=self.connection_timeout)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "server_address": self.server_address,
            "retry_delays": self.retry_delays,
            "health_retry_delays": self.health_retry_delays,
            "request_timeout": self.request_timeout,
            "connection_timeout": self.connection_timeout,
            "auth_token": self.auth_token,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)
        self._init_runtime()

    def __repr__(self) -> str:
        return f"LightningStoreClient({self.server_address!r})"

    # ---- transport ----

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
            except _TRANSPORT_ERRORS:
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
    ) -> Optional[bytes]:
        """Send one API request with the retry rules; returns the body, or None for a 'not found' answer."""
        if "//" in path or path.endswith("/"):
            raise ValueError(f"empty id in request {method} {path!r}; ids must be non-empty strings")
        ResourcesHints.drop()
        url = self._api + path
        data = None if payload is None else _ANY.dump_json(payload, serialize_as_any=True)
        headers = request_headers or (_JSON_HEADERS if data is not None else None)
        attempt = 0
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
            except _TRANSPORT_ERRORS as exc:
                error: Exception = exc
                reason = f"{type(exc).__name__}: {exc}"
            else:
                if status < 400:
                    return body
                error = exception_from_response(status, body, url)
                if none_if_missing and isinstance(error, LightningStoreNotFoundError):
                    if error.error_type == NOT_FOUND_ERROR_TYPE:
                        return None
                if not ((status >= 500 and status != 501) or status == 408):
                    raise error
                reason = f"HTTP {status}"
            if attempt >= len(self.retry_delays):
                raise error
            if self.health_retry_delays and not await self._probe_health():
                logger.warning("%s %s failed (%s) and the store server is not healthy; giving up", method, url, reason)
                raise error
            delay = self.retry_delays[attempt]
            attempt += 1
            logger.info(
                "%s %s failed (%s); retry %d/%d in %.2fs", method, url, reason, attempt, len(self.retry_delays), delay
            )
            await asyncio.sleep(delay)

    async def _call(self, adapter: TypeAdapter[T], method: str, path: str, payload: Any = None, **kwargs: Any) -> T:
        body = await self._request(method, path, payload, **kwargs)
        assert body is not None
        return adapter.validate_json(body)

    async def _maybe(self, adapter: TypeAdapter[T], path: str) -> Optional[T]:
        if "//" in path or path.endswith("/"):
            return None  # an empty id names nothing
        body = await self._request("GET", path, none_if_missing=True)
        return None if body is None else adapter.validate_json(body)

    # ---- the LightningStore contract ----

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=True)

    def otlp_traces_endpoint(self) -> str:
        return f"{self.server_address}/v1/traces"

    async def health(self) -> bool:
        """Whether the server answers its health check now (single probe, no retries)."""
        try:
            async with self._session().get(
                self._health_url, timeout=aiohttp.ClientTimeout(total=self.connection_timeout)
            ) as response:
                return response.status == 200
        except _TRANSPORT_ERRORS:
            return False

    async def statistics(self) -> LightningStoreStatistics:
        return await self._call(_DICT, "GET", "/statistics")  # type: ignore[return-value]

    async def start_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
        worker_id: Optional[str] = None,
    ) -> AttemptedRollout:
        payload = {
            "input": input,
            "mode": mode,
            "resources_id": resources_id,
            "config": _checked_config(config),
            "metadata": metadata,
            "worker_id": worker_id,
        }
        return await self._call(_ATTEMPTED, "POST", "/rollouts", payload)

    async def enqueue_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> Rollout:
        config_ = _checked_config(config)
        request = {"input": input, "mode": mode, "resources_id": resources_id, "config": config_, "metadata": metadata}
        rollouts = await self._call(_ROLLOUTS, "POST", "/queues/rollouts/enqueue", {"rollouts": [request]})
        return rollouts[0]

    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        return await self._call(_ROLLOUTS, "POST", "/queues/rollouts/enqueue", {"rollouts": list(rollouts)})

    async def dequeue_rollout(self, worker_id: Optional[str] = None) -> Optional[AttemptedRollout]:
        """Claim the next rollout; on any error returns None (warning once per run of failures)."""
        check_worker_id(worker_id)  # a bad argument is the caller's error, not a failed dequeue
        try:
            claimed = await self._dequeue(1, worker_id)
        except Exception as exc:
            if not self._dequeue_failing:
                self._dequeue_failing = True
                logger.warning("dequeue_rollout from %s failed; returning None: %r", self.server_address, exc)
            return None
        self._dequeue_failing = False
        return claimed[0] if claimed else None

    async def dequeue_many_rollouts(self, *, limit: int = 1, worker_id: Optional[str] = None) -> list[AttemptedRollout]:
        if limit <= 0:
            return []
        return await self._dequeue(limit, worker_id)

    async def _dequeue(self, limit: int, worker_id: Optional[str]) -> list[AttemptedRollout]:
        """Claim rollouts, keeping the resources versions the server reports for them (see `_resources_hint`)."""
        headers: dict[str, str] = {}
        body = await self._request(
            "POST",
            "/queues/rollouts/dequeue",
            {"limit": limit, "worker_id": worker_id},
            response_headers=headers,
            request_headers=_DEQUEUE_HEADERS,
        )
        assert body is not None
        claimed = _ATTEMPTED_LIST.validate_json(body)
        if claimed:
            self._resources.remember(headers.get(RESOURCES_VERSIONS_HEADER.lower()))
        return claimed

    async def start_attempt(self, rollout_id: str, worker_id: Optional[str] = None) -> AttemptedRollout:
        path = f"/rollouts/{_seg(rollout_id, 'rollout_id')}/attempts"
        return await self._call(_ATTEMPTED, "POST", path, {"worker_id": worker_id})

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
        payload = {
            "status_in": _list(status_in),
            "rollout_id_in": _list(rollout_id_in),
            "rollout_id_contains": rollout_id_contains,
            "filter_logic": filter_logic,
            "sort_by": sort_by,
            "sort_order": sort_order,
            "limit": limit,
            "offset": offset,
            "status": _list(status),
            "rollout_ids": _list(rollout_ids),
        }
        return await self._call(_ROLLOUT_PAGE, "POST", "/rollouts/search", payload)  # type: ignore[return-value]

    async def get_rollout_by_id(self, rollout_id: str) -> Optional[Union[Rollout, AttemptedRollout]]:
        return await self._maybe(_ANY_ROLLOUT, f"/rollouts/{_seg(rollout_id, 'rollout_id')}")

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
        config = config if is_unset(config) else _checked_config(config)
        payload = _given(
            input=input, mode=mode, resources_id=resources_id, status=status, config=config, metadata=metadata
        )
        return await self._call(_ROLLOUT, "POST", f"/rollouts/{_seg(rollout_id, 'rollout_id')}", payload)

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        """Long-poll the server until every known rollout is terminal or `timeout` passes (None: no deadline)."""
        timeout = check_wait_timeout(timeout)
        ids = list(rollout_ids)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            remaining = self.wait_poll_seconds if deadline is None else max(0.0, deadline - loop.time())
            poll = min(remaining, self.wait_poll_seconds)
            request_timeout = aiohttp.ClientTimeout(
                total=poll + self.request_timeout, sock_connect=self.connection_timeout
            )
            body, complete = await self._wait_once(ids, poll, request_timeout)
            finished = _ROLLOUTS.validate_json(body)
            if complete or (deadline is not None and loop.time() >= deadline):
                return finished

    async def _wait_once(
        self, ids: list[str], poll: float, request_timeout: aiohttp.ClientTimeout
    ) -> tuple[bytes, bool]:
        headers: dict[str, str] = {}
        body = await self._request(
            "POST",
            "/waits/rollouts",
            {"rollout_ids": ids, "timeout": poll},
            timeout=request_timeout,
            response_headers=headers,
        )
        assert body is not None
        return body, headers.get(WAIT_COMPLETE_HEADER.lower(), "true") == "true"

    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: Optional[str] = "sequence_id",
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Attempt]:
        payload = {"sort_by": sort_by, "sort_order": sort_order, "limit": limit, "offset": offset}
        return await self._call(
            _ATTEMPT_PAGE, "POST", f"/rollouts/{_seg(rollout_id, 'rollout_id')}/attempts/search", payload
        )

    async def get_latest_attempt(self, rollout_id: str) -> Optional[Attempt]:
        return await self._maybe(_ATTEMPT, f"/rollouts/{_seg(rollout_id, 'rollout_id')}/attempts/latest")

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: Any = UNSET,
        worker_id: Any = UNSET,
        last_heartbeat_time: Any = UNSET,
        metadata: Any = UNSET,
    ) -> Attempt:
        payload = _given(status=status, worker_id=worker_id, last_heartbeat_time=last_heartbeat_time, metadata=metadata)
        path = f"/rollouts/{_seg(rollout_id, 'rollout_id')}/attempts/{_seg(attempt_id, 'attempt_id')}"
        return await self._call(_ATTEMPT, "POST", path, payload)

    async def add_span(self, span: Span) -> Optional[Span]:
        return await self._call(_SPAN, "POST", "/spans", span)

    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        """Store several spans in one request (all or nothing, like the in-process stores)."""
        if not spans:
            return []
        return await self._call(_SPANS, "POST", "/spans/many", list(spans))

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        if not rollout_attempt_ids:
            return []
        payload = {"rollout_attempt_ids": [list(pair) for pair in rollout_attempt_ids]}
        result = await self._call(_DICT, "POST", "/spans/next/many", payload)
        return [int(v) for v in result["sequence_ids"]]

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        payload = {"rollout_id": rollout_id, "attempt_id": attempt_id}
        result = await self._call(_DICT, "POST", "/spans/next", payload)
        return int(result["sequence_id"])

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
        payload = {
            "rollout_id": rollout_id,
            "attempt_id": attempt_id,
            "trace_id": trace_id,
            "trace_id_contains": trace_id_contains,
            "span_id": span_id,
            "span_id_contains": span_id_contains,
            "parent_id": parent_id,
            "parent_id_contains": parent_id_contains,
            "name": name,
            "name_contains": name_contains,
            "filter_logic": filter_logic,
            "limit": limit,
            "offset": offset,
            "sort_by": sort_by,
            "sort_order": sort_order,
        }
        return await self._call(_SPAN_PAGE, "POST", "/spans/search", payload)

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        return await self._read_resources("POST", "/resources", dict(resources))  # type: ignore[return-value]

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        path = f"/resources/{_seg(resources_id, 'resources_id')}"
        return await self._read_resources("POST", path, dict(resources))  # type: ignore[return-value]

    async def get_resources_by_id(self, resources_id: str) -> Optional[ResourcesUpdate]:
        """The bundle, from the client's cache when the last dequeue reported its version current."""
        cached = self._resources.by_id(resources_id) if isinstance(resources_id, str) else None
        if cached is not None:
            return _RESOURCES.validate_json(cached)
        path = f"/resources/{_seg(resources_id, 'resources_id')}"
        if path.endswith("/"):
            return None  # an empty id names nothing
        return await self._read_resources("GET", path)

    async def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        """The latest bundle, answered from the last dequeue's report when it settles the question."""
        known, cached = self._resources.latest()
        if known:
            return None if cached is None else _RESOURCES.validate_json(cached)
        return await self._read_resources("GET", "/resources/latest")

    async def _read_resources(self, method: str, path: str, payload: Any = None) -> Optional[ResourcesUpdate]:
        body = await self._request(method, path, payload, none_if_missing=method == "GET")
        if body is None:
            return None
        update = _RESOURCES.validate_json(body)
        self._resources.keep(update, body)
        return update

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
        params: dict[str, Any] = {"sort_order": sort_order, "limit": str(limit), "offset": str(offset)}
        for key, value in (
            ("resources_id", resources_id),
            ("resources_id_contains", resources_id_contains),
            ("sort_by", sort_by),
        ):
            if value is not None:
                params[key] = value
        return await self._call(_RESOURCES_PAGE, "GET", "/resources", params=params)

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
        payload = {
            "status_in": _list(status_in),
            "worker_id_contains": worker_id_contains,
            "filter_logic": filter_logic,
            "sort_by": sort_by,
            "sort_order": sort_order,
            "limit": limit,
            "offset": offset,
        }
        return await self._call(_WORKER_PAGE, "POST", "/workers/search", payload)

    async def get_worker_by_id(self, worker_id: str) -> Optional[Worker]:
        return await self._maybe(_WORKER, f"/workers/{_seg(worker_id, 'worker_id')}")

    async def update_worker(self, worker_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        if not worker_id:
            raise ValueError(f"worker_id must be a non-empty string, got {worker_id!r}")
        return await self._call(
            _WORKER, "POST", f"/workers/{_seg(worker_id, 'worker_id')}", _given(heartbeat_stats=heartbeat_stats)
        )
