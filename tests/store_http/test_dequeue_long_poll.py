"""`POST /queues/rollouts/dequeue` with `wait`: a long-poll answered as soon as a rollout is enqueued."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agentlightning.store import InMemoryLightningStore, LightningStoreServer

API = "/v1/agl"
DEQUEUE = f"{API}/queues/rollouts/dequeue"


@pytest.fixture
async def inner() -> AsyncIterator[InMemoryLightningStore]:
    store = InMemoryLightningStore(scan_debounce_seconds=0)
    yield store
    await store.close()


@pytest.fixture
async def server(inner: InMemoryLightningStore) -> AsyncIterator[LightningStoreServer]:
    srv = LightningStoreServer(inner, port=0)
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def http(server: LightningStoreServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.endpoint, timeout=60) as client:
        yield client


async def enqueue(http: httpx.AsyncClient, *inputs: Any) -> list[str]:
    response = await http.post(f"{API}/queues/rollouts/enqueue", json={"rollouts": [{"input": i} for i in inputs]})
    assert response.status_code == 201, response.text
    return [r["rollout_id"] for r in response.json()]


async def test_an_enqueue_answers_a_waiting_dequeue(http: httpx.AsyncClient) -> None:
    waiting = asyncio.ensure_future(http.post(DEQUEUE, json={"worker_id": "w-1", "wait": 25}))
    await asyncio.sleep(0.5)
    assert not waiting.done()
    [rollout_id] = await enqueue(http, "late")
    began = time.monotonic()
    response = await asyncio.wait_for(waiting, 20)
    assert time.monotonic() - began < 20  # woken by the enqueue, not at the end of the 25 s wait
    assert response.status_code == 200, response.text
    assert [(r["rollout_id"], r["attempt"]["worker_id"]) for r in response.json()] == [(rollout_id, "w-1")]


async def test_a_wait_ends_empty_after_its_time(http: httpx.AsyncClient) -> None:
    began = time.monotonic()
    response = await http.post(DEQUEUE, json={"wait": 0.3})
    assert response.status_code == 200 and response.json() == []
    assert time.monotonic() - began >= 0.29


async def test_without_wait_the_dequeue_answers_at_once_as_in_v03(http: httpx.AsyncClient) -> None:
    for body in (None, {}, {"limit": 1}, {"wait": None}, {"wait": 0}):
        response = await http.post(DEQUEUE, json=body) if body is not None else await http.post(DEQUEUE)
        assert response.status_code == 200 and response.json() == [], body
    await enqueue(http, 1, 2)
    response = await http.post(DEQUEUE, json={"limit": 5, "wait": 10})
    assert [r["input"] for r in response.json()] == [1, 2]


@pytest.mark.parametrize(("wait", "status"), [(-1, 400), ("soon", 422), ([1], 422)])
async def test_a_bad_wait_is_refused_naming_it(http: httpx.AsyncClient, wait: Any, status: int) -> None:
    response = await http.post(DEQUEUE, json={"wait": wait})
    assert response.status_code == status, response.text
    assert "wait" in response.text


async def test_a_client_that_hangs_up_claims_nothing(http: httpx.AsyncClient, inner: InMemoryLightningStore) -> None:
    waiting = asyncio.ensure_future(http.post(DEQUEUE, json={"worker_id": "gone", "wait": 25}))
    await asyncio.sleep(0.5)
    waiting.cancel()  # closes the connection
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0.5)
    [rollout_id] = await enqueue(http, "for someone else")
    await asyncio.sleep(0.3)
    rollout = await inner.get_rollout_by_id(rollout_id)
    assert rollout is not None and rollout.status == "queuing"


async def test_stopping_the_server_ends_a_waiting_dequeue(
    http: httpx.AsyncClient, server: LightningStoreServer
) -> None:
    waiting = asyncio.ensure_future(http.post(DEQUEUE, json={"wait": 25}))
    await asyncio.sleep(0.5)
    await asyncio.wait_for(server.stop(), 15)
    response = await asyncio.wait_for(waiting, 15)
    assert response.status_code == 200 and response.json() == []


# ---- a client against a server that predates `wait` ----


@pytest.fixture(params=["ignores", "refuses"])
async def old_server(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A v0.3-style dequeue route: it ignores `wait` (answers at once) or refuses it as an unknown field."""
    from aiohttp import web

    bodies: list[dict[str, Any]] = []

    async def dequeue(req: web.Request) -> web.Response:
        body = await req.json()
        bodies.append(body)
        if request.param == "refuses" and "wait" in body:
            detail = {
                "detail": "invalid DequeueBody: wait: Extra inputs are not permitted",
                "error_type": "ValidationError",
            }
            return web.json_response(detail, status=422)
        return web.json_response([])

    app = web.Application()
    app.router.add_post(DEQUEUE, dequeue)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", bodies
    finally:
        await runner.cleanup()


async def test_a_client_polls_a_server_that_predates_long_polls_without_spinning(
    old_server: tuple[str, list[dict[str, Any]]],
) -> None:
    from agentlightning.store import LightningStoreClient

    endpoint, bodies = old_server
    client = LightningStoreClient(endpoint, retry_delays=(), health_retry_delays=())
    client.queue_poll_seconds = 0.2
    try:
        assert await client.wait_for_dequeue(timeout=1.0, worker_id="w") == []
        asked = len(bodies)
        assert 3 <= asked <= 8, bodies  # every ~0.2 s, not in a tight loop
        assert "wait" not in bodies[-1]  # it learnt the server does not know `wait`
        assert await client.wait_for_dequeue(timeout=0.3) == []
        assert all("wait" not in b for b in bodies[asked:])
    finally:
        await client.close()
