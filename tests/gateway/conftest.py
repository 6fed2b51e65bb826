"""Fixtures for gateway tests: a SQLite store file, loopback upstreams, started gateways, HTTP helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from agentlightning.gateway import Gateway, GatewayConfig
from agentlightning.store.sqlite import SqliteLightningStore
from agentlightning.types import AttemptedRollout
from tests.support.openai_server import OpenAITestServer

from .upstream import UpstreamServer


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteLightningStore]:
    store = SqliteLightningStore(tmp_path / "gateway.db")
    yield store
    await store.close()


@pytest.fixture
def backend() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as server:
        yield server


@pytest.fixture
def upstream() -> Iterator[UpstreamServer]:
    with UpstreamServer() as server:
        yield server


@pytest.fixture
async def attempt(store: SqliteLightningStore) -> AttemptedRollout:
    return await store.start_rollout(input={"task": "test"}, mode="train")


@pytest.fixture
async def make_gateway(store: SqliteLightningStore) -> AsyncIterator[Callable[..., Any]]:
    """`await make_gateway(upstreams=[...], **config)`: a started thread-mode gateway over `store`."""
    started: list[Gateway] = []

    async def make(*, gateway_store: Any = None, secret: str = "test-secret", **config: Any) -> Gateway:
        config.setdefault("num_retries", 2)
        gateway = Gateway(gateway_store or store, GatewayConfig(**config), secret=secret)
        await gateway.start()
        started.append(gateway)
        return gateway

    yield make
    for gateway in started:
        await gateway.stop()


@pytest.fixture
async def gateway(make_gateway: Callable[..., Any], backend: OpenAITestServer) -> Gateway:
    """A gateway in front of the loopback chat server `backend`."""
    return await make_gateway(upstreams=[backend.base_url])


def auth(gateway: Gateway, attempt: AttemptedRollout) -> dict[str, str]:
    return {"Authorization": f"Bearer {gateway.key(attempt.rollout_id, attempt.attempt.attempt_id)}"}


async def post(url: str, *, headers: dict[str, str], **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30.0) as client:
        return await client.post(url, headers=headers, **kwargs)
