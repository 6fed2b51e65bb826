"""`LightningStoreClient`: the `LightningStore` contract over HTTP, talking to a `LightningStoreServer`.

The requests themselves (sessions, retries within a time budget, idempotency keys) are `_transport`'s;
this module maps the contract onto the API: the generic routes of `_client_endpoints`, and the calls that
need more than one request shape (the queue and its long polls, waits, batched spans, cached resources).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Optional

import aiohttp

from agentlightning.store._arguments import (
    check_dequeue_wait,
    check_resources,
    check_run,
    check_wait_timeout,
    check_worker_id,
)
from agentlightning.store.base import LightningStore, LightningStoreCapabilities, is_unset
from agentlightning.store.forwarding import ForwardingLightningStore
from agentlightning.types import (
    AttemptedRollout,
    AttemptStatus,
    EnqueueRolloutRequest,
    FinishedAttempt,
    NamedResources,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutMode,
    Span,
    TaskInput,
)

from ._client_endpoints import (
    _ANY,
    _ATTEMPTED_LIST,
    _DEQUEUE_HEADERS,
    _DICT,
    _ENDPOINTS,
    _FINISHED,
    _RESOURCES,
    _ROLLOUTS,
    _SPANS,
    _json_value,
    _route_missing,
    _seg,
)
from ._payloads import check_documents, checked_config, encoded_span, span_batches
from ._resources_hint import RESOURCES_VERSIONS_HEADER, ResourcesHints
from ._transport import API_PATH, AUTH_TOKEN_ENV, TRANSPORT_ERRORS, StoreTransport
from .errors import LightningStoreRequestError

__all__ = ["LightningStoreClient", "AUTH_TOKEN_ENV", "API_PATH"]

logger = logging.getLogger(__name__)

WAIT_COMPLETE_HEADER = "X-AGL-Wait-Complete"  # set by the server on each long-poll answer
LONG_POLL_HEADER = "X-AGL-Long-Poll"  # set by a server that honoured a dequeue's `wait`


class LightningStoreClient(StoreTransport, ForwardingLightningStore):
    """A store living behind the server at `server_address` (e.g. `http://127.0.0.1:4747`).

    Failed requests (transport errors, 5xx, 408) are sent again with jittered exponential backoff for
    up to `retry_budget` seconds (default 60, env `AGL_STORE_RETRY_BUDGET`; 0 disables retries); then
    a transport failure raises `LightningStoreUnavailableError` naming the server. `retry_delays`
    replaces the backoff with a fixed schedule; with `health_retry_delays` each retry first probes
    `/health` and a server that never answers ends the retries. `auth_token` (or env `AGL_STORE_TOKEN`)
    is sent as a bearer token. `add_many_spans` splits batches so no request is over `max_body_size`
    bytes (the server's limit, 16 MiB by default).

    `server_address` is the API base, `http://host:port/v1/agl` (as in v0.3), whichever form was given.
    Contract methods without an entry in `_ENDPOINTS` below are written out where they need more than
    one request shape (the queue, waits, batched spans, cached resources).
    """

    #: Longest single long-poll of `wait_for_rollouts`; longer waits are several polls.
    wait_poll_seconds: float = 30.0

    def _init_runtime(self) -> None:
        super()._init_runtime()
        self._resources = ResourcesHints()
        self._server_long_polls = True  # until a server shows it predates `wait` on dequeues
        self._server_finishes = True  # until a server shows it predates `finish_attempt`'s route

    def __repr__(self) -> str:
        return f"LightningStoreClient({self.server_root!r})"

    async def _forward(self, method: str, arguments: dict[str, Any]) -> Any:
        endpoint = _ENDPOINTS.get(method)
        if endpoint is None:  # a batch call without its own route: the contract's default, over the routes above
            return await getattr(LightningStore, method)(self, **arguments)
        fields = {name: value for name, value in arguments.items() if not is_unset(value)}
        if "sort_order" in fields and fields["sort_order"] is None:  # None is ascending (v0.3)
            fields["sort_order"] = "asc"
        check_documents(fields)
        if "config" in fields:
            fields["config"] = checked_config(fields["config"])
        path = endpoint.path
        for name in endpoint.path_names():
            segment = _seg(fields.pop(name), name)
            if not segment:
                if endpoint.optional:
                    return None  # an empty id names nothing
                raise ValueError(f"{name} must be a non-empty string, got ''")
            path = path.replace("{" + name + "}", segment)
        payload: Any = None
        raw_body: Optional[bytes] = None
        params: Optional[dict[str, str]] = None
        if endpoint.body_from == "span":
            raw_body = encoded_span(fields["span"], self.max_body_size)
        elif endpoint.body_from is not None:
            payload = fields[endpoint.body_from]
        elif endpoint.query:
            params = {k: v if isinstance(v, str) else str(v) for k, v in fields.items() if v is not None}
        elif endpoint.method == "POST":
            payload = {name: _json_value(value) for name, value in fields.items()}
        body = await self._request(
            endpoint.method, path, payload, params=params, none_if_missing=endpoint.optional, raw_body=raw_body
        )
        if body is None or (endpoint.optional and body == b"null"):
            return None
        return endpoint.adapter.validate_json(body)

    # ---- the LightningStore contract ----

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=True)

    def otlp_traces_endpoint(self) -> str:
        return f"{self.server_root}/v1/traces"

    async def health(self) -> bool:
        """Whether the server answers its health check now (single probe, no retries)."""
        try:
            async with self._session().get(
                self._health_url, timeout=aiohttp.ClientTimeout(total=self.connection_timeout)
            ) as response:
                return response.status == 200
        except TRANSPORT_ERRORS:
            return False

    async def enqueue_rollout(
        self,
        input: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        config: Optional[RolloutConfig] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> Rollout:
        config_ = checked_config(config)
        request = {"input": input, "mode": mode, "resources_id": resources_id, "config": config_, "metadata": metadata}
        check_documents(request)
        rollouts = await self._call(_ROLLOUTS, "POST", "/queues/rollouts/enqueue", {"rollouts": [request]})
        return rollouts[0]

    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        for i, request in enumerate(rollouts):
            fields = request if isinstance(request, dict) else {"input": request.input, "metadata": request.metadata}
            check_documents(dict(fields), f"rollouts[{i}].")  # type: ignore[arg-type]
        return await self._call(_ROLLOUTS, "POST", "/queues/rollouts/enqueue", {"rollouts": list(rollouts)})

    async def dequeue_rollout(
        self, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> Optional[AttemptedRollout]:
        """Claim the next rollout; None when the queue is empty.

        Errors are raised, never read as an empty queue: a refused token or request at once, a server
        that stays unreachable once the retry budget is spent.
        """
        check_worker_id(worker_id)
        check_run(run)
        claimed = await self._dequeue(1, worker_id, run)
        return claimed[0] if claimed else None

    async def dequeue_many_rollouts(
        self, *, limit: int = 1, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> list[AttemptedRollout]:
        check_run(run)
        if limit <= 0:
            return []
        return await self._dequeue(limit, worker_id, run)

    async def wait_for_dequeue(
        self, *, timeout: float, limit: int = 1, worker_id: Optional[str] = None, run: Optional[str] = None
    ) -> list[AttemptedRollout]:
        """Long-poll the server's queue: claimed rollouts as soon as one is enqueued, or [] after `timeout`.

        A server that predates long-polls (it refuses or ignores `wait`) is asked every `queue_poll_seconds`.
        """
        wait = check_dequeue_wait(timeout)
        check_worker_id(worker_id)
        check_run(run)
        if limit <= 0:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            began = loop.time()
            poll = min(max(0.0, deadline - began), self.wait_poll_seconds) if self._server_long_polls else 0.0
            headers: dict[str, str] = {}
            try:
                claimed = await self._dequeue(limit, worker_id, run, wait=poll, response_headers=headers)
            except LightningStoreRequestError as exc:
                if poll == 0 or "wait" not in str(exc):
                    raise
                claimed, headers = [], {}  # refused as an unknown field: the server predates long-polls
            if claimed or loop.time() >= deadline:
                return claimed
            long_polled = LONG_POLL_HEADER.lower() in headers
            if poll > 0 and not long_polled:
                self._server_long_polls = False
                logger.warning(
                    "store server at %s does not long-poll dequeues (older version); asking every %gs instead",
                    self.server_root,
                    self.queue_poll_seconds,
                )
            if not long_polled or loop.time() - began < poll:  # answered early (e.g. shutting down): no spin
                await asyncio.sleep(min(self.queue_poll_seconds, max(0.0, deadline - loop.time())))

    async def _dequeue(
        self,
        limit: int,
        worker_id: Optional[str],
        run: Optional[str] = None,
        *,
        wait: float = 0.0,
        response_headers: Optional[dict[str, str]] = None,
    ) -> list[AttemptedRollout]:
        """Claim rollouts, keeping the resources versions the server reports for them (see `_resources_hint`)."""
        headers: dict[str, str] = {} if response_headers is None else response_headers
        payload: dict[str, Any] = {"limit": limit, "worker_id": worker_id}
        if run is not None:  # sent only when set: an older server refuses the unknown field
            payload["run"] = run
        timeout: Optional[aiohttp.ClientTimeout] = None
        if wait > 0:
            payload["wait"] = wait
            timeout = aiohttp.ClientTimeout(total=wait + self.request_timeout, sock_connect=self.connection_timeout)
        body = await self._request(
            "POST",
            "/queues/rollouts/dequeue",
            payload,
            timeout=timeout,
            response_headers=headers,
            request_headers=_DEQUEUE_HEADERS,
        )
        assert body is not None
        claimed = _ATTEMPTED_LIST.validate_json(body)
        if claimed:
            self._resources.remember(headers.get(RESOURCES_VERSIONS_HEADER.lower()))
        return claimed

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

    async def add_many_spans(self, spans: Sequence[Span]) -> Sequence[Span]:
        """Store several spans in one request (all or nothing, like the in-process stores).

        A batch larger than `max_body_size` bytes goes as several requests under the limit, each all or nothing.
        """
        stored: list[Span] = []
        for batch in span_batches(spans, self.max_body_size):
            body = await self._request("POST", "/spans/many", raw_body=batch)
            assert body is not None
            stored.extend(_SPANS.validate_json(body))
        return stored

    async def finish_attempt(
        self, rollout_id: str, attempt_id: str, status: AttemptStatus, spans: Sequence[Span] = ()
    ) -> FinishedAttempt:
        """The attempt's last spans and its final status in one request.

        Spans over `max_body_size` go ahead with `add_many_spans` (the status then travels with the last
        part); a server that predates the `/finish` route (404 without an error type of ours, or 405) gets
        the v0.3 calls instead, `add_many_spans` then `update_attempt`.
        """
        if not self._server_finishes:
            return await LightningStore.finish_attempt(self, rollout_id, attempt_id, status, spans)
        batches = span_batches(spans, self.max_body_size)
        stored: list[Span] = []
        for batch in batches[:-1]:
            stored.extend(await self.add_many_spans(_SPANS.validate_json(batch)))
        path = f"/rollouts/{_seg(rollout_id, 'rollout_id')}/attempts/{_seg(attempt_id, 'attempt_id')}/finish"
        last = batches[-1] if batches else b"[]"
        body = b'{"status":' + _ANY.dump_json(status) + b',"spans":' + last + b"}"
        try:
            raw = await self._request("POST", path, raw_body=body)
        except LightningStoreRequestError as exc:
            if not _route_missing(exc):
                raise
            self._server_finishes = False
            logger.info(
                "store server at %s has no /finish route (older version); sending spans and status apart",
                self.server_root,
            )
            remaining = _SPANS.validate_json(last)
            finished = await LightningStore.finish_attempt(self, rollout_id, attempt_id, status, remaining)
            return FinishedAttempt(attempt=finished.attempt, spans=[*stored, *finished.spans])
        assert raw is not None
        finished = _FINISHED.validate_json(raw)
        if stored:
            finished.spans[:0] = stored
        return finished

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

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        check_resources(resources)
        return await self._read_resources("POST", "/resources", dict(resources))  # type: ignore[return-value]

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        check_resources(resources)
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
