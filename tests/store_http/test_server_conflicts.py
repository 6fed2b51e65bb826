"""Over HTTP a change the state machine refuses is a 409 with a message, never a 400 or a 500."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from agentlightning.store import InMemoryLightningStore, LightningStoreServer

API = "/v1/agl"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    store = InMemoryLightningStore(scan_debounce_seconds=0)
    server = LightningStoreServer(store, host="127.0.0.1", port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.endpoint, timeout=30) as client:
            yield client
    finally:
        await server.stop()
        await store.close()


async def test_requeuing_a_finished_rollout_is_409(http: httpx.AsyncClient) -> None:
    started = (await http.post(f"{API}/rollouts", json={"input": 1})).json()
    rid = started["rollout_id"]
    done = await http.post(f"{API}/rollouts/{rid}/attempts/latest", json={"status": "succeeded"})
    assert done.status_code == 200, done.text
    refused = await http.post(f"{API}/rollouts/{rid}", json={"status": "queuing"})
    assert refused.status_code == 409, refused.text
    body = refused.json()
    assert body["error_type"] == "ForbiddenTransitionError" and "'succeeded' to 'queuing'" in body["detail"]
    assert (await http.get(f"{API}/rollouts/{rid}")).json()["status"] == "succeeded"


async def test_updating_a_superseded_attempt_is_409(http: httpx.AsyncClient) -> None:
    started = (await http.post(f"{API}/rollouts", json={"input": 1})).json()
    rid, first = started["rollout_id"], started["attempt"]["attempt_id"]
    assert (await http.post(f"{API}/rollouts/{rid}/attempts", json={})).status_code == 201
    refused = await http.post(f"{API}/rollouts/{rid}/attempts/{first}", json={"status": "succeeded"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["error_type"] == "StaleAttemptError" and first in refused.json()["detail"]
