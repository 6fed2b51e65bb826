"""LightningStoreClient against real local servers: retry rules, error mapping, long-poll waits, pickling."""

from __future__ import annotations

import asyncio
import logging
import pickle
import threading
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, Optional

import aiohttp
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentlightning.store import InMemoryLightningStore, LightningStoreClient, LightningStoreServer
from agentlightning.store_http.errors import (
    LightningStoreAuthError,
    LightningStoreNotFoundError,
    LightningStoreRequestError,
    LightningStoreServerError,
    LightningStoreUnavailableError,
)
from agentlightning.store_http.retry import RetryBackoff
from agentlightning.types import AUTO_SEQUENCE_ID, EnqueueRolloutRequest, PromptTemplate, Rollout, Span
from agentlightning.web.launcher import PythonServerLauncher, PythonServerLauncherArgs, pick_free_port

FAST: dict[str, Any] = {"retry_delays": (0.01, 0.01), "health_retry_delays": (0.01, 0.01)}


class ScriptedServer:
    """A real HTTP server answering API calls from a script of (status, json) replies, counting requests."""

    def __init__(self) -> None:
        self.replies: dict[str, list[tuple[int, Any]]] = {}
        self.health_replies: list[int] = []
        self.calls: Counter[str] = Counter()
        self.health_probes = 0
        self.launcher = PythonServerLauncher(
            Starlette(
                routes=[
                    Route("/v1/agl/health", self._health),
                    Route("/v1/agl/{path:path}", self._api, methods=["GET", "POST"]),
                ]
            ),
            PythonServerLauncherArgs(port=0, launch_mode="asyncio", healthcheck_url="/v1/agl/health"),
        )

    async def _health(self, request: Request) -> Response:
        self.health_probes += 1
        status = self.health_replies.pop(0) if self.health_replies else 200
        return JSONResponse({"status": "ok" if status == 200 else "down"}, status_code=status)

    async def _api(self, request: Request) -> Response:
        path = request.path_params["path"]
        self.calls[path] += 1
        script = self.replies.get(path) or [(200, {})]
        status, payload = script.pop(0) if len(script) > 1 else script[0]
        return JSONResponse(payload, status_code=status)

    def script(self, path: str, *replies: tuple[int, Any]) -> None:
        self.replies[path] = list(replies)

    @property
    def endpoint(self) -> str:
        return self.launcher.access_endpoint


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer()
    await server.launcher.start()
    server.health_probes = 0  # forget the launcher's own startup check
    yield server
    await server.launcher.stop()


@pytest.fixture
async def client_of(scripted: ScriptedServer) -> AsyncIterator[LightningStoreClient]:
    client = LightningStoreClient(scripted.endpoint, **FAST)
    yield client
    await client.close()


STATS = {"name": "scripted", "total_rollouts": 3}


# ---- retry rules ----


@pytest.mark.parametrize("status", [500, 502, 503, 408])
async def test_5xx_and_408_are_retried_after_a_health_probe(
    scripted: ScriptedServer, client_of: LightningStoreClient, status: int
) -> None:
    scripted.script("statistics", (status, {"detail": "try later"}), (200, STATS))
    assert await client_of.statistics() == STATS
    assert scripted.calls["statistics"] == 2
    assert scripted.health_probes == 1


async def test_persistent_5xx_raises_after_the_last_retry(
    scripted: ScriptedServer, client_of: LightningStoreClient
) -> None:
    scripted.script("statistics", (500, {"detail": "db down", "error_type": "OperationalError", "traceback": "tb"}))
    with pytest.raises(LightningStoreServerError, match="db down") as caught:
        await client_of.statistics()
    assert caught.value.status == 500 and caught.value.server_traceback == "tb"
    assert isinstance(caught.value, aiohttp.ClientResponseError) and caught.value.message == "db down"
    assert scripted.calls["statistics"] == 3  # the first try + len(retry_delays)


async def test_unhealthy_server_stops_the_retries(scripted: ScriptedServer, client_of: LightningStoreClient) -> None:
    scripted.script("statistics", (503, {"detail": "overloaded"}))
    scripted.health_replies = [503, 503, 503]
    with pytest.raises(LightningStoreServerError):
        await client_of.statistics()
    assert scripted.calls["statistics"] == 1
    assert scripted.health_probes == 3  # once, then after each of the two health delays


async def test_empty_delays_disable_retries_and_probes(scripted: ScriptedServer) -> None:
    client = LightningStoreClient(scripted.endpoint, retry_delays=(), health_retry_delays=())
    scripted.script("statistics", (503, {"detail": "busy"}), (200, STATS))
    with pytest.raises(LightningStoreServerError):
        await client.statistics()
    assert scripted.calls["statistics"] == 1 and scripted.health_probes == 0
    await client.close()


@pytest.mark.parametrize(
    ("status", "error_type", "exception"),
    [
        (400, "ValueError", ValueError),
        (404, "ValueError", ValueError),
        (409, "", ValueError),
        (422, "ValidationError", ValueError),
        (404, "KeyError", KeyError),
        (401, "AuthenticationError", PermissionError),
    ],
)
async def test_other_4xx_raise_at_once_with_the_server_message(
    scripted: ScriptedServer, client_of: LightningStoreClient, status: int, error_type: str, exception: type
) -> None:
    scripted.script("statistics", (status, {"detail": "you did X wrong", "error_type": error_type}))
    with pytest.raises(exception, match="you did X wrong") as caught:
        await client_of.statistics()
    assert caught.value.status == status
    # v0.3's client raised aiohttp.ClientResponseError: code catching that (and reading .status /
    # .message / .request_info) keeps working.
    assert isinstance(caught.value, aiohttp.ClientResponseError)
    assert caught.value.message.startswith("you did X wrong")
    assert str(caught.value.request_info.real_url).endswith("/statistics")
    assert caught.value.request_info.method == "GET"
    assert scripted.calls["statistics"] == 1 and scripted.health_probes == 0


async def test_not_found_answers_become_none(scripted: ScriptedServer, client_of: LightningStoreClient) -> None:
    not_found = (404, {"detail": "rollout 'ro-x' not found", "error_type": "NotFound"})
    scripted.script("rollouts/ro-x", not_found)
    scripted.script("resources/latest", not_found)
    assert await client_of.get_rollout_by_id("ro-x") is None
    assert await client_of.get_latest_resources() is None
    scripted.script("rollouts/ro-y", (404, {"detail": "Not Found"}))  # an unknown route is an error, not None
    with pytest.raises(LightningStoreRequestError):
        await client_of.get_rollout_by_id("ro-y")


async def test_connection_refused_is_retried_then_raised(caplog: pytest.LogCaptureFixture) -> None:
    client = LightningStoreClient(
        f"http://127.0.0.1:{pick_free_port()}", retry_delays=(0.01, 0.01), health_retry_delays=()
    )
    with caplog.at_level(logging.INFO, logger="agentlightning.store_http.client"):
        with pytest.raises(LightningStoreUnavailableError, match="unreachable") as caught:
            await client.statistics()
    assert isinstance(caught.value.__cause__, aiohttp.ClientConnectorError)
    assert isinstance(caught.value, aiohttp.ClientOSError)  # the family v0.3's client raised
    assert "retry 1/2" in caplog.text and "retry 2/2" in caplog.text
    assert isinstance(caplog.records[-1], logging.LogRecord)
    await client.close()


async def test_connection_refused_with_health_probes_gives_up_when_never_healthy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = LightningStoreClient(f"http://127.0.0.1:{pick_free_port()}", **FAST)
    with pytest.raises(OSError):
        await client.statistics()
    assert "not healthy; giving up" in caplog.text
    await client.close()


async def test_dropped_connections_are_retried() -> None:
    connections = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await reader.readline()
        writer.close()

    tcp = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]
    client = LightningStoreClient(f"http://127.0.0.1:{port}", retry_delays=(0.01, 0.01), health_retry_delays=())
    try:
        with pytest.raises(LightningStoreUnavailableError) as caught:
            await client.get_next_span_sequence_id("ro-1", "at-1")  # a POST: aiohttp itself never re-sends it
        assert isinstance(caught.value.__cause__, aiohttp.ClientConnectionError)
        assert connections == 3
    finally:
        await client.close()
        tcp.close()
        await tcp.wait_closed()


async def test_dequeue_reports_a_down_server_once_the_retry_budget_is_spent() -> None:
    """A dead server is not an empty queue: after the budget, the error names the server."""
    port = pick_free_port()
    client = LightningStoreClient(f"http://127.0.0.1:{port}", retry_budget=0.5)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(LightningStoreUnavailableError, match=f"127.0.0.1:{port}.*retry_budget=0.5s"):
            await asyncio.wait_for(client.dequeue_rollout(worker_id="w"), timeout=30)
        assert 0.4 <= loop.time() - started < 10
    finally:
        await client.close()


async def test_dequeue_raises_a_refused_token_at_once(scripted: ScriptedServer) -> None:
    client = LightningStoreClient(scripted.endpoint, retry_budget=30, auth_token="wrong")
    scripted.script("queues/rollouts/dequeue", (401, {"detail": "invalid bearer token", "error_type": "Auth"}))
    try:
        with pytest.raises(LightningStoreAuthError, match="(?=.*AGL_STORE_TOKEN)(?=.*--auth-token)"):
            await asyncio.wait_for(client.dequeue_rollout(worker_id="w"), timeout=10)
        assert scripted.calls["queues/rollouts/dequeue"] == 1
    finally:
        await client.close()


def test_backoff_grows_with_jitter_and_stops_at_the_budget() -> None:
    backoff = RetryBackoff(budget=10.0, initial=0.2, maximum=1.0, multiplier=2.0, jitter=0.5)
    for retry, nominal in enumerate([0.2, 0.4, 0.8, 1.0, 1.0]):
        drawn = {backoff.delay(retry, elapsed=0.0) for _ in range(50)}
        assert all(d is not None and nominal * 0.5 <= d <= nominal for d in drawn), (retry, drawn)
        assert len(drawn) > 1  # jittered, so clients that lost the same server do not retry in lockstep
    assert backoff.delay(3, elapsed=9.9) == pytest.approx(0.1, abs=1e-9)  # never past the budget
    assert backoff.delay(0, elapsed=10.0) is None


def test_retry_budget_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert LightningStoreClient("http://h:1").retry_budget == 60.0
    monkeypatch.setenv("AGL_STORE_RETRY_BUDGET", "5")
    assert LightningStoreClient("http://h:1").retry_budget == 5.0
    assert LightningStoreClient("http://h:1", retry_budget=0).retry_budget == 0.0
    assert pickle.loads(pickle.dumps(LightningStoreClient("http://h:1"))).retry_budget == 5.0
    with pytest.raises(ValueError, match="retry_budget"):
        LightningStoreClient("http://h:1", retry_budget=-1)
    monkeypatch.setenv("AGL_STORE_RETRY_BUDGET", "soon")
    with pytest.raises(ValueError, match="AGL_STORE_RETRY_BUDGET"):
        LightningStoreClient("http://h:1")


async def test_calls_ride_out_a_server_restart() -> None:
    """Requests sent while the server is down complete once it is back, within the retry budget."""
    store = InMemoryLightningStore(thread_safe=True)
    port = pick_free_port()
    first = LightningStoreServer(store, port=port)
    await first.start()
    client = LightningStoreClient(first.endpoint, retry_budget=30)
    try:
        rollout = await client.enqueue_rollout(input=1)
        await first.stop()
        claiming = asyncio.create_task(client.dequeue_rollout(worker_id="w"))
        stored = asyncio.create_task(client.add_resources({"p": PromptTemplate(template="x", engine="f-string")}))
        await asyncio.sleep(1.0)
        assert not claiming.done() and not stored.done()  # still retrying, not failed
        second = LightningStoreServer(store, port=port)
        await second.start()
        try:
            claimed = await asyncio.wait_for(claiming, timeout=30)
            assert claimed is not None and claimed.rollout_id == rollout.rollout_id
            assert (await asyncio.wait_for(stored, timeout=30)).version == 1
            assert await client.dequeue_rollout(worker_id="w") is None  # claimed exactly once
        finally:
            await second.stop()
    finally:
        await client.close()
        await store.close()


# ---- against a real LightningStoreServer ----


class GatedStore(InMemoryLightningStore):
    """Memory store that signals (across threads) each time a blocking wait starts."""

    def __init__(self) -> None:
        super().__init__(scan_debounce_seconds=0)
        self.blocking_waits = 0
        self.wait_started = threading.Event()

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Rollout]:
        if timeout is None or timeout > 0:
            self.blocking_waits += 1
            self.wait_started.set()
        return await super().wait_for_rollouts(rollout_ids=rollout_ids, timeout=timeout)


@pytest.fixture
async def gated() -> GatedStore:
    return GatedStore()


@pytest.fixture
async def served(gated: GatedStore) -> AsyncIterator[LightningStoreClient]:
    server = LightningStoreServer(gated, port=0)
    await server.start()
    client = LightningStoreClient(server.endpoint)
    yield client
    await client.close()
    await server.stop()


async def test_wait_returns_when_another_task_completes_the_rollout(
    served: LightningStoreClient, gated: GatedStore
) -> None:
    rollout = await served.enqueue_rollout(input=1)
    waiting = asyncio.create_task(served.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=60))
    assert await asyncio.to_thread(gated.wait_started.wait, 30)
    await served.update_rollout(rollout.rollout_id, status="succeeded")
    finished = await asyncio.wait_for(waiting, timeout=30)
    assert [(r.rollout_id, r.status) for r in finished] == [(rollout.rollout_id, "succeeded")]


async def test_wait_returns_the_finished_part_on_timeout(served: LightningStoreClient) -> None:
    done = await served.enqueue_rollout(input=1)
    pending = await served.enqueue_rollout(input=2)
    await served.update_rollout(done.rollout_id, status="failed")
    finished = await served.wait_for_rollouts(rollout_ids=[pending.rollout_id, done.rollout_id], timeout=0.2)
    assert [r.rollout_id for r in finished] == [done.rollout_id]
    assert await served.wait_for_rollouts(rollout_ids=[pending.rollout_id], timeout=0) == []


async def test_wait_longer_than_one_poll_keeps_polling(served: LightningStoreClient, gated: GatedStore) -> None:
    served.wait_poll_seconds = 0.05
    rollout = await served.enqueue_rollout(input=1)
    waiting = asyncio.create_task(served.wait_for_rollouts(rollout_ids=[rollout.rollout_id, "ro-unknown"]))
    while gated.blocking_waits < 2:  # the client came back for a second long-poll
        gated.wait_started.clear()
        assert await asyncio.to_thread(gated.wait_started.wait, 30)
    assert not waiting.done()
    await served.update_rollout(rollout.rollout_id, status="cancelled")
    finished = await asyncio.wait_for(waiting, timeout=30)
    assert [r.status for r in finished] == ["cancelled"]


async def test_auth_failures_are_not_retried(gated: GatedStore) -> None:
    server = LightningStoreServer(gated, port=0, auth_token="right")
    await server.start()
    try:
        client = LightningStoreClient(server.endpoint, auth_token="wrong", **FAST)
        with pytest.raises(LightningStoreAuthError, match="bearer token"):
            await client.query_rollouts()
        await client.close()
    finally:
        await server.stop()


async def test_store_errors_keep_their_family(served: LightningStoreClient) -> None:
    with pytest.raises(ValueError, match="ro-nowhere"):
        await served.update_rollout("ro-nowhere", status="succeeded")
    with pytest.raises(ValueError, match="limit"):
        await served.query_rollouts(limit=-2)
    with pytest.raises(ValueError, match="worker_id"):
        await served.update_worker("")
    assert await served.get_worker_by_id("") is None
    assert not isinstance(LightningStoreNotFoundError(404, "x"), ValueError)


async def test_v03_catch_sites_for_aiohttp_errors_still_catch(served: LightningStoreClient) -> None:
    """v0.3 code wrote `except aiohttp.ClientResponseError as e: if e.status == 400`; both catch sites work."""
    for call in (
        served.update_rollout("ro-nowhere", status="succeeded"),
        served.query_rollouts(limit=-2),
    ):
        try:
            await call
        except aiohttp.ClientResponseError as error:
            assert 400 <= error.status < 500 and isinstance(error, ValueError)
            assert error.message and str(error) == error.message
        else:
            raise AssertionError("the call was expected to fail")


# ---- the client object itself ----


def test_server_address_is_the_api_base_whichever_form_is_given() -> None:
    assert LightningStoreClient("http://h:1/v1/agl/").server_address == "http://h:1/v1/agl"
    assert LightningStoreClient("http://h:1").server_address == "http://h:1/v1/agl"
    assert pickle.loads(pickle.dumps(LightningStoreClient("http://h:1"))).server_address == "http://h:1/v1/agl"
    assert LightningStoreClient("http://h:1/").otlp_traces_endpoint() == "http://h:1/v1/traces"
    with pytest.raises(ValueError, match="http"):
        LightningStoreClient("h:1")


async def test_pickled_client_and_one_session_per_event_loop(served: LightningStoreClient) -> None:
    await served.enqueue_rollout(input=1)
    copy: LightningStoreClient = pickle.loads(pickle.dumps(served))
    assert copy.retry_delays == served.retry_delays

    def in_a_thread() -> int:
        async def count() -> int:
            total = (await copy.query_rollouts()).total
            await copy.close()
            return total

        return asyncio.run(count())

    assert await asyncio.to_thread(in_a_thread) == 1
    assert await asyncio.to_thread(in_a_thread) == 1  # a fresh loop gets a fresh session
    assert (await served.query_rollouts()).total == 1


async def test_close_loop_resources_closes_only_the_running_loops_session(served: LightningStoreClient) -> None:
    await served.enqueue_rollout(input=1)
    own = served._session()
    other_loop = asyncio.new_event_loop()

    def on_other_loop() -> aiohttp.ClientSession:
        async def use_and_release() -> aiohttp.ClientSession:
            await served.query_rollouts()
            session = served._session()
            await served.close_loop_resources()
            return session

        return other_loop.run_until_complete(use_and_release())

    try:
        released = await asyncio.to_thread(on_other_loop)
    finally:
        other_loop.close()
    assert released.closed and not own.closed
    assert (await served.query_rollouts()).total == 1  # the client stays usable on this loop


async def test_close_waits_for_sessions_of_other_running_loops(served: LightningStoreClient) -> None:
    other_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=other_loop.run_forever, daemon=True)
    thread.start()
    try:
        future = asyncio.run_coroutine_threadsafe(served.query_rollouts(), other_loop)
        await asyncio.wrap_future(future)
        (session,) = [s for loop, s in served._sessions.items() if loop is other_loop]
        await served.close()
        assert session.closed
    finally:
        other_loop.call_soon_threadsafe(other_loop.stop)
        await asyncio.to_thread(thread.join, 5)
        other_loop.close()


# ---- resources versions reported with a dequeue ----


def prompt(text: str) -> dict[str, Any]:
    return {"prompt": PromptTemplate(template=text)}


@pytest.fixture
async def recorded(
    gated: GatedStore, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[LightningStoreClient, list[str]]]:
    """A client of a real server, and the "METHOD /path" of every request it sends."""
    server = LightningStoreServer(gated, port=0)
    await server.start()
    client = LightningStoreClient(server.endpoint)
    sent: list[str] = []
    send = client._request

    async def recording(method: str, path: str, *args: Any, **kwargs: Any) -> Optional[bytes]:
        sent.append(f"{method} {path.split('/')[1]}")
        return await send(method, path, *args, **kwargs)

    monkeypatch.setattr(client, "_request", recording)
    yield client, sent
    await client.close()
    await server.stop()


async def test_resources_read_right_after_a_dequeue_come_from_the_cache_while_current(
    recorded: tuple[LightningStoreClient, list[str]], gated: GatedStore
) -> None:
    client, sent = recorded
    bundle = await client.add_resources(prompt("v1"))
    await client.enqueue_many_rollouts(
        [EnqueueRolloutRequest(input=i, resources_id=bundle.resources_id) for i in range(2)]
    )
    await client.enqueue_rollout(input="no resources named: the latest")
    sent.clear()
    reads = []
    for _ in range(3):
        claimed = await client.dequeue_rollout()
        assert claimed is not None
        if claimed.resources_id is not None:
            reads.append(await client.get_resources_by_id(claimed.resources_id))
        else:
            reads.append(await client.get_latest_resources())
    assert sent == ["POST queues"] * 3  # no resources request at all
    assert [(r.resources_id, r.version) for r in reads if r is not None] == [(bundle.resources_id, 1)] * 3
    assert reads[0] is not reads[1]  # each read gets its own copy

    # A change made elsewhere shows at once: the next dequeue reports the new version.
    await gated.update_resources(bundle.resources_id, prompt("v2"))
    await client.enqueue_rollout(input=3, resources_id=bundle.resources_id)
    claimed = await client.dequeue_rollout()
    assert claimed is not None
    fresh = await client.get_resources_by_id(bundle.resources_id)
    assert fresh is not None and fresh.version == 2
    assert fresh.resources["prompt"].template == "v2"  # type: ignore[union-attr]


async def test_without_any_resources_the_dequeue_answers_the_latest_read(
    recorded: tuple[LightningStoreClient, list[str]],
) -> None:
    client, sent = recorded
    await client.enqueue_rollout(input=1)
    assert await client.dequeue_rollout() is not None
    assert await client.get_latest_resources() is None
    assert sent == ["POST queues", "POST queues"]


async def test_a_resources_read_after_another_request_asks_the_server(
    recorded: tuple[LightningStoreClient, list[str]], gated: GatedStore
) -> None:
    client, sent = recorded
    await client.enqueue_rollout(input=1)
    assert await client.dequeue_rollout() is not None
    await client.get_rollout_by_id("ro-unknown")  # any other request ends what the dequeue told
    added = await gated.add_resources(prompt("new"))
    latest = await client.get_latest_resources()
    assert latest is not None and latest.resources_id == added.resources_id
    assert sent[-1] == "GET resources"


async def test_the_dequeue_hint_belongs_to_the_task_that_dequeued(
    recorded: tuple[LightningStoreClient, list[str]], gated: GatedStore
) -> None:
    client, sent = recorded
    go = asyncio.Event()

    async def read_later() -> Any:
        await go.wait()
        return await client.get_latest_resources()

    elsewhere = asyncio.create_task(read_later())  # started before the dequeue: its context has no hint
    await client.enqueue_rollout(input=1)
    assert await client.dequeue_rollout() is not None
    added = await gated.add_resources(prompt("new"))
    go.set()
    latest = await elsewhere
    assert latest is not None and latest.resources_id == added.resources_id
    assert sent[-1] == "GET resources"


# ---- finish_attempt: the last spans and the final status in one request ----


class AttemptedRolloutStub:
    """Just the ids `span_for` reads, for a server whose rollouts are scripted."""

    def __init__(self, rollout_id: str, attempt_id: str) -> None:
        self.rollout_id = rollout_id
        self.attempt = type("AttemptIds", (), {"attempt_id": attempt_id})()


def span_for(claimed: Any, name: str, size: int = 10) -> Span:
    return Span.from_attributes(
        rollout_id=claimed.rollout_id,
        attempt_id=claimed.attempt.attempt_id,
        sequence_id=AUTO_SEQUENCE_ID,
        name=name,
        attributes={"payload": "x" * size},
    )


async def test_a_rollout_costs_three_requests_with_finish_attempt(
    recorded: tuple[LightningStoreClient, list[str]], gated: GatedStore
) -> None:
    client, sent = recorded
    await client.enqueue_rollout(input=1)
    claimed = await client.dequeue_rollout(worker_id="w")
    assert claimed is not None
    spans = [span_for(claimed, f"s{i}") for i in range(5)]
    finished = await client.finish_attempt(claimed.rollout_id, claimed.attempt.attempt_id, "succeeded", spans)
    assert sent == ["POST queues", "POST queues", "POST rollouts"]
    assert [s.sequence_id for s in finished.spans] == [1, 2, 3, 4, 5]
    assert finished.attempt.status == "succeeded"
    assert [s.name for s in await gated.query_spans(claimed.rollout_id)] == [f"s{i}" for i in range(5)]


async def test_finish_attempt_over_the_body_limit_sends_the_first_spans_ahead(gated: GatedStore) -> None:
    server = LightningStoreServer(gated, port=0)
    await server.start()
    client = LightningStoreClient(server.endpoint, max_body_size=3000)
    try:
        claimed = await client.start_rollout(input=1)
        spans = [span_for(claimed, f"s{i}", size=1200) for i in range(4)]
        finished = await client.finish_attempt(claimed.rollout_id, claimed.attempt.attempt_id, "failed", spans)
        assert [(s.name, s.sequence_id) for s in finished.spans] == [(f"s{i}", i + 1) for i in range(4)]
        assert finished.attempt.status == "failed"
        assert (await gated.query_spans(claimed.rollout_id)).total == 4
    finally:
        await client.close()
        await server.stop()


async def test_finish_attempt_against_a_server_without_the_route_sends_spans_and_status_apart(
    scripted: ScriptedServer, client_of: LightningStoreClient
) -> None:
    path = "rollouts/ro-1/attempts/at-1"
    stored = span_for(AttemptedRolloutStub("ro-1", "at-1"), "s").model_copy(update={"sequence_id": 7})
    attempt = {"rollout_id": "ro-1", "attempt_id": "at-1", "sequence_id": 1, "start_time": 1.0, "status": "failed"}
    scripted.script(path + "/finish", (404, {"detail": "Not Found"}))  # what a v0.3 server answers
    scripted.script("spans/many", (201, [stored.model_dump(mode="json")]))
    scripted.script(path, (200, attempt))
    for _ in range(2):
        finished = await client_of.finish_attempt("ro-1", "at-1", "failed", [stored])
        assert finished.attempt.status == "failed" and [s.sequence_id for s in finished.spans] == [7]
    # The missing route is asked once; then the client remembers the server predates it.
    assert (scripted.calls[path + "/finish"], scripted.calls["spans/many"], scripted.calls[path]) == (1, 2, 2)


async def test_finish_attempt_reports_a_missing_attempt_as_update_attempt_does(served: LightningStoreClient) -> None:
    started = await served.start_rollout(input=1)
    for rollout_id in (started.rollout_id, "ro-missing"):
        with pytest.raises((ValueError, KeyError)) as expected:
            await served.update_attempt(rollout_id, "at-missing", status="succeeded")
        with pytest.raises(type(expected.value), match="at-missing|ro-missing") as raised:
            await served.finish_attempt(rollout_id, "at-missing", "succeeded")
        assert (raised.value.status, raised.value.error_type) == (404, expected.value.error_type)  # type: ignore[union-attr]
    assert served._server_finishes  # an unknown attempt is not taken for a server without the route
