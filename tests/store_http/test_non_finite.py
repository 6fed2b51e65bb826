"""The store server and NaN / Infinity tokens from clients that write them (Python's json, JavaScript can't).

Span telemetry keeps them as strings; documents and heartbeat times are answered 400 naming the field.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from agentlightning.store import InMemoryLightningStore, LightningStoreServer

API = "/v1/agl"
JSON = {"content-type": "application/json"}


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    store = InMemoryLightningStore(scan_debounce_seconds=0)
    server = LightningStoreServer(store, port=0)
    await server.start()
    async with httpx.AsyncClient(base_url=server.endpoint + API, timeout=30) as client:
        yield client
    await server.stop()


async def _started(http: httpx.AsyncClient) -> tuple[str, str]:
    response = await http.post("/rollouts", json={"input": 1})
    assert response.status_code == 201, response.text
    body = response.json()
    return body["rollout_id"], body["attempt"]["attempt_id"]


async def test_nan_tokens_in_span_attributes_are_kept_as_strings(http: httpx.AsyncClient) -> None:
    rollout_id, attempt_id = await _started(http)
    span = (
        b'{"rollout_id": "%s", "attempt_id": "%s", "sequence_id": 1, "trace_id": "%s", "span_id": "%s", '
        b'"name": "llm", "attributes": {"reward": NaN, "logprobs": [-1.5, -Infinity]}}'
        % (rollout_id.encode(), attempt_id.encode(), b"1" * 32, b"2" * 16)
    )
    response = await http.post("/spans", content=span, headers=JSON)
    assert response.status_code == 201, response.text
    assert response.json()["attributes"] == {"reward": "NaN", "logprobs": ["-1.5", "-Infinity"]}
    stored = await http.get("/spans", params={"rollout_id": rollout_id})
    assert stored.status_code == 200 and stored.json()["items"][0]["attributes"]["reward"] == "NaN"
    rollout = await http.get(f"/rollouts/{rollout_id}")
    assert rollout.json()["status"] == "running"


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("/rollouts", b'{"input": {"x": NaN}}', "input['x']"),
        ("/rollouts", b'{"input": 1, "metadata": {"m": [1, Infinity]}}', "metadata['m'][1]"),
        ("/queues/rollouts/enqueue", b'{"rollouts": [{"input": -Infinity}]}', "input"),
    ],
)
async def test_nan_tokens_in_documents_are_400_naming_the_field(
    http: httpx.AsyncClient, path: str, body: bytes, needle: str
) -> None:
    response = await http.post(path, content=body, headers=JSON)
    assert response.status_code == 400, response.text
    assert needle in response.json()["detail"] and "NaN or infinity" in response.json()["detail"]
    assert (await http.post("/rollouts/search", json={})).json()["total"] == 0


async def test_a_nan_heartbeat_time_is_400(http: httpx.AsyncClient) -> None:
    rollout_id, attempt_id = await _started(http)
    response = await http.post(
        f"/rollouts/{rollout_id}/attempts/{attempt_id}", content=b'{"last_heartbeat_time": NaN}', headers=JSON
    )
    assert response.status_code == 400 and "last_heartbeat_time" in response.json()["detail"]
    attempt = await http.get(f"/rollouts/{rollout_id}/attempts/latest")
    assert attempt.json()["last_heartbeat_time"] is None
