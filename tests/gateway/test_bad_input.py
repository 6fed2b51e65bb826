"""Every OpenAI route of the gateway refuses bad requests with a clear 4xx and records nothing."""

from __future__ import annotations

from typing import Any, Callable

import httpx
import pytest

from agentlightning.gateway import Gateway
from agentlightning.store.sqlite import SqliteLightningStore
from agentlightning.types import AttemptedRollout
from tests.support.openai_server import OpenAITestServer

from .conftest import auth, post

ROUTES = ["chat/completions", "completions", "responses"]
GOOD = {
    "chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "completions": {"model": "m", "prompt": "hi"},
    "responses": {"model": "m", "input": "hi"},
}


def url(gateway: Gateway, attempt: AttemptedRollout, route: str, mode: str = "train") -> str:
    return f"{gateway.openai_base_url(attempt.rollout_id, attempt.attempt.attempt_id, 'train')}/{route}".replace(
        "/mode/train/", f"/mode/{mode}/"
    )


@pytest.mark.parametrize("route", ROUTES)
async def test_bad_requests_are_refused(
    gateway: Gateway, store: SqliteLightningStore, attempt: AttemptedRollout, route: str
) -> None:
    headers = auth(gateway, attempt)
    cases: list[tuple[int, str, dict[str, str], object]] = [
        (404, url(gateway, attempt, route, "test"), headers, GOOD[route]),
        (401, url(gateway, attempt, route), {}, GOOD[route]),
        (401, url(gateway, attempt, route), {"Authorization": "Bearer agl-wrong"}, GOOD[route]),
        (400, url(gateway, attempt, route), headers, b"{not json"),
        (400, url(gateway, attempt, route), headers, [1, 2]),
        (400, url(gateway, attempt, route), headers, {k: v for k, v in GOOD[route].items() if k != "model"}),
        (400, url(gateway, attempt, route), headers, {"model": "m"}),
    ]
    for status, target, request_headers, body in cases:
        if isinstance(body, bytes):
            response = await post(target, headers=request_headers, content=body)
        else:
            response = await post(target, headers=request_headers, json=body)
        assert response.status_code == status, (target, body, response.text)
        assert response.json()["error"]["message"]
    assert list(await store.query_spans(attempt.rollout_id)) == []


@pytest.mark.parametrize("route", ROUTES)
async def test_unknown_and_stale_attempts_are_refused(
    gateway: Gateway, store: SqliteLightningStore, attempt: AttemptedRollout, route: str
) -> None:
    unknown = "ro-nothere"
    target = gateway.openai_base_url(unknown, "at-x", "train") + f"/{route}"
    response = await post(target, headers={"Authorization": f"Bearer {gateway.key(unknown, 'at-x')}"}, json=GOOD[route])
    assert response.status_code == 404 and unknown in response.json()["error"]["message"]
    await store.start_attempt(attempt.rollout_id)
    stale = await post(url(gateway, attempt, route), headers=auth(gateway, attempt), json=GOOD[route])
    assert stale.status_code == 409 and "stale" in stale.json()["error"]["message"]
    assert list(await store.query_spans(attempt.rollout_id)) == []


@pytest.mark.parametrize("status", ["succeeded", "failed", "timeout", "unresponsive"])
async def test_calls_right_after_the_attempt_ended_are_refused(
    make_gateway: Callable[..., Any],
    backend: OpenAITestServer,
    store: SqliteLightningStore,
    attempt: AttemptedRollout,
    status: str,
) -> None:
    """A checked attempt used to be trusted for attempt_cache_seconds (2 s), so calls after its end went through."""
    gateway = await make_gateway(upstreams=[backend.base_url], attempt_cache_seconds=3600)
    target = url(gateway, attempt, "chat/completions")
    assert (await post(target, headers=auth(gateway, attempt), json=GOOD["chat/completions"])).status_code == 200
    await store.update_attempt(attempt.rollout_id, attempt.attempt.attempt_id, status=status)
    late = await post(target, headers=auth(gateway, attempt), json=GOOD["chat/completions"])
    assert late.status_code == 409 and f"already ended ({status})" in late.json()["error"]["message"]
    assert len(backend.requests) == 1


async def test_models_route_refusals(gateway: Gateway, attempt: AttemptedRollout) -> None:
    base = gateway.openai_base_url(attempt.rollout_id, attempt.attempt.attempt_id, "train")
    async with httpx.AsyncClient(timeout=30.0) as client:
        assert (await client.get(base + "/models")).status_code == 401
        assert (
            await client.get(base.replace("/mode/train/", "/mode/x/") + "/models", headers=auth(gateway, attempt))
        ).status_code == 404
        wrong = gateway.openai_base_url("ro-nothere", "at-x", "val") + "/models"
        assert (
            await client.get(wrong, headers={"Authorization": f"Bearer {gateway.key('ro-nothere', 'at-x')}"})
        ).status_code == 404
        assert (await client.post(base + "/models", headers=auth(gateway, attempt))).status_code == 405
        assert (await client.get(base + "/embeddings", headers=auth(gateway, attempt))).status_code == 404


async def test_requests_over_the_size_limit_are_413(
    make_gateway: Callable[..., Any], backend: OpenAITestServer, store: SqliteLightningStore, attempt: AttemptedRollout
) -> None:
    gateway = await make_gateway(upstreams=[backend.base_url], max_body_size=32 * 1024)
    headers = auth(gateway, attempt)
    huge = {"model": "policy", "messages": [{"role": "user", "content": "x" * 50_000}]}
    response = await post(url(gateway, attempt, "chat/completions"), headers=headers, json=huge)
    assert response.status_code == 413 and "32768 bytes" in response.json()["error"]["message"]
    event = {"event_type": "reward", "data": {"value": 1.0, "note": "x" * 50_000}}
    assert (
        await post(gateway.event_url(attempt.rollout_id, attempt.attempt.attempt_id), headers=headers, json=event)
    ).status_code == 413
    assert backend.requests == [] and list(await store.query_spans(attempt.rollout_id)) == []
