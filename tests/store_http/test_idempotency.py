"""A POST retried after its answer was lost is replayed, not redone (found by the chaos test).

Before: `LightningStoreClient` sent an enqueue again when a proxy's 502 hid that the server had done
it, so one `enqueue_many_rollouts` of 20 made 40 rollouts; a lost dequeue answer left an attempt
that no runner had. Now every try of one call carries the same `Idempotency-Key` and the server
replays the first answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest

from agentlightning.store import InMemoryLightningStore, LightningStoreClient, LightningStoreServer
from agentlightning.store_http._idempotency import IDEMPOTENCY_KEY_HEADER, IdempotencyMiddleware
from agentlightning.types import EnqueueRolloutRequest
from tests.support.faulty_proxy import FaultyProxy


@pytest.fixture
async def server() -> AsyncIterator[tuple[LightningStoreServer, InMemoryLightningStore]]:
    store = InMemoryLightningStore(thread_safe=True)
    served = LightningStoreServer(store, port=0)
    await served.start()
    yield served, store
    await served.stop()
    await store.close()


async def test_lost_answers_neither_double_an_enqueue_nor_strand_a_dequeue(
    server: tuple[LightningStoreServer, InMemoryLightningStore],
) -> None:
    served, store = server
    root = served.endpoint.removesuffix("/v1/agl")
    proxy = FaultyProxy(root, seed=3, error_rate=0.0, delay_rate=0.0, lost_response_rate=0.5)
    await asyncio.to_thread(proxy.start)
    client = LightningStoreClient(proxy.url, retry_delays=(0.01,) * 30)
    try:
        batch = [EnqueueRolloutRequest(input=i) for i in range(20)]
        enqueued = await client.enqueue_many_rollouts(batch)
        enqueued += [await client.enqueue_rollout(input=100 + i) for i in range(10)]
        claimed = [await client.dequeue_rollout(worker_id="w") for _ in range(30)]
        assert await client.dequeue_rollout(worker_id="w") is None
    finally:
        await client.close()
        await asyncio.to_thread(proxy.stop)

    assert proxy.stats.lost_responses > 10  # the server did the work and the client never heard back
    rollouts = list(await store.query_rollouts())
    assert sorted(r.rollout_id for r in rollouts) == sorted(r.rollout_id for r in enqueued)
    assert sorted(c.rollout_id for c in claimed if c is not None) == sorted(r.rollout_id for r in enqueued)
    for rollout in rollouts:  # one attempt each: no dequeue handed out an attempt nobody received
        assert len(list(await store.query_attempts(rollout.rollout_id))) == 1


async def test_the_same_key_replays_and_another_key_or_path_does_the_work(
    server: tuple[LightningStoreServer, InMemoryLightningStore],
) -> None:
    served, store = server
    url = f"{served.endpoint.removesuffix('/v1/agl')}/v1/agl/queues/rollouts/enqueue"
    async with aiohttp.ClientSession() as session:

        async def enqueue(key: str) -> tuple[int, str]:
            headers = {IDEMPOTENCY_KEY_HEADER: key}
            async with session.post(url, json={"rollouts": [{"input": key}]}, headers=headers) as response:
                return response.status, (await response.json())[0]["rollout_id"]

        first = await enqueue("k1")
        concurrent = await asyncio.gather(*(enqueue("k1") for _ in range(5)))
        other = await enqueue("k2")
    assert first[0] < 300 and all(answer == first for answer in concurrent)
    assert other[1] != first[1]
    assert len(list(await store.query_rollouts())) == 2


async def test_server_errors_are_not_remembered_and_memory_is_bounded() -> None:
    calls: list[int] = []

    async def app(scope: dict, receive: object, send: object) -> None:  # type: ignore[type-arg]
        calls.append(1)
        status = 500 if len(calls) == 1 else 200
        await send({"type": "http.response.start", "status": status, "headers": []})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": str(len(calls)).encode()})  # type: ignore[operator]

    middleware = IdempotencyMiddleware(app, max_entries=3)  # type: ignore[arg-type]

    async def post(key: bytes, path: str = "/v1/agl/x") -> tuple[int, bytes]:
        sent: list[dict[str, object]] = []

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": path, "headers": [(b"idempotency-key", key)]}
        await middleware(scope, None, send)  # type: ignore[arg-type]
        return int(sent[0]["status"]), bytes(sent[1]["body"])  # type: ignore[arg-type]

    assert await post(b"a") == (500, b"1")
    assert await post(b"a") == (200, b"2")  # the 500 was not kept: the retry does the work
    assert await post(b"a") == (200, b"2")  # ...and its 200 is replayed
    assert await post(b"a", "/v1/agl/y") == (200, b"3")  # a key belongs to one path
    for key in (b"b", b"c", b"d"):
        await post(key)
    assert len(middleware._answers) == 3  # pyright: ignore[reportPrivateUsage]
    assert await post(b"a") == (200, b"7")  # evicted (oldest): done again
