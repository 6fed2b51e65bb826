"""The events API: rewards exactly as `emit_reward` records them, annotations, and refusals (401/404/409/422)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from agentlightning.emitter import emit_reward, find_final_reward
from agentlightning.gateway import Gateway
from agentlightning.store.sqlite import SqliteLightningStore
from agentlightning.types import AttemptedRollout

from .conftest import auth, post


def events_url(gateway: Gateway, rollout_id: str, attempt_id: str) -> str:
    return gateway.event_url(rollout_id, attempt_id)


async def test_reward_event_is_the_span_emit_reward_records(
    gateway: Gateway, store: SqliteLightningStore, attempt: AttemptedRollout
) -> None:
    url = events_url(gateway, attempt.rollout_id, attempt.attempt.attempt_id)
    response = await post(url, headers=auth(gateway, attempt), json={"event_type": "reward", "data": {"value": 0.7}})
    assert response.status_code == 201, response.text
    body = response.json()
    (span,) = list(await store.query_spans(attempt.rollout_id))
    assert body["span_id"] == span.span_id and body["sequence_id"] == span.sequence_id == 1
    expected = emit_reward(0.7, propagate=False)
    assert span.name == expected.name and span.attributes == expected.attributes
    assert span.attempt_id == attempt.attempt.attempt_id
    assert find_final_reward([span]) == 0.7


async def test_multi_dimensional_reward_and_annotation_events(
    gateway: Gateway, store: SqliteLightningStore, attempt: AttemptedRollout
) -> None:
    url = events_url(gateway, attempt.rollout_id, attempt.attempt.attempt_id)
    headers = auth(gateway, attempt)
    reward = {"event_type": "reward", "data": {"value": {"task": 1.0, "style": 0.5}, "primary_key": "task"}}
    note = {"event_type": "tool_result", "data": {"tool": "calculator", "ok": True, "detail": {"steps": [1, 2]}}}
    assert (await post(url, headers=headers, json=reward)).status_code == 201
    assert (await post(url, headers=headers, json=note)).status_code == 201
    reward_span, note_span = list(await store.query_spans(attempt.rollout_id))
    expected = emit_reward({"task": 1.0, "style": 0.5}, primary_key="task", propagate=False)
    assert reward_span.attributes == expected.attributes
    assert note_span.name == "agentlightning.annotation"
    assert note_span.attributes == {
        "tool": "calculator",
        "ok": True,
        "detail.steps": [1, 2],
        "agentlightning.event_type": "tool_result",
    }
    assert find_final_reward([reward_span, note_span]) == 1.0


@pytest.mark.parametrize(
    "body, message",
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"data": {}}', "event_type"),
        (b'{"event_type": ""}', "event_type"),
        (b'{"event_type": "reward", "data": 3}', "data"),
        (b'{"event_type": "reward", "data": {}}', "data.value"),
        (b'{"event_type": "reward", "data": {"value": "high"}}', "must be a number"),
        (b'{"event_type": "reward", "data": {"value": true}}', "must be a number"),
        (b'{"event_type": "reward", "data": {"value": {"a": 1}}}', "primary_key"),
        (b'{"event_type": "reward", "data": {"value": {"a": "x"}, "primary_key": "a"}}', "must be a number"),
        (b'{"event_type": "reward", "data": {"value": 1, "extra": 2}}', "only data.value"),
        (b'{"event_type": "note", "data": {}, "surprise": 1}', "surprise"),
    ],
)
async def test_bad_event_bodies_are_422_and_store_nothing(
    gateway: Gateway, store: SqliteLightningStore, attempt: AttemptedRollout, body: bytes, message: str
) -> None:
    url = events_url(gateway, attempt.rollout_id, attempt.attempt.attempt_id)
    response = await post(url, headers={**auth(gateway, attempt), "Content-Type": "application/json"}, content=body)
    assert response.status_code == 422
    assert message in response.json()["detail"]
    assert list(await store.query_spans(attempt.rollout_id)) == []


async def test_unknown_rollout_or_attempt_is_404(gateway: Gateway, attempt: AttemptedRollout) -> None:
    for rollout_id, attempt_id in [("ro-unknown", "at-unknown"), (attempt.rollout_id, "at-unknown")]:
        headers = {"Authorization": f"Bearer {gateway.key(rollout_id, attempt_id)}"}
        response = await post(
            events_url(gateway, rollout_id, attempt_id),
            headers=headers,
            json={"event_type": "reward", "data": {"value": 1}},
        )
        assert response.status_code == 404 and "not found" in response.json()["detail"]


async def test_stale_and_ended_attempts_are_409(
    gateway: Gateway, store: SqliteLightningStore, attempt: AttemptedRollout
) -> None:
    old = attempt.attempt.attempt_id
    retry = await store.start_attempt(attempt.rollout_id)
    reward = {"event_type": "reward", "data": {"value": 1.0}}
    stale = await post(events_url(gateway, attempt.rollout_id, old), headers=auth(gateway, attempt), json=reward)
    assert stale.status_code == 409 and "stale" in stale.json()["detail"]
    await store.update_attempt(attempt.rollout_id, retry.attempt.attempt_id, status="succeeded")
    ended = await post(
        events_url(gateway, attempt.rollout_id, retry.attempt.attempt_id), headers=auth(gateway, retry), json=reward
    )
    assert ended.status_code == 409 and "already ended" in ended.json()["detail"]
    assert list(await store.query_spans(attempt.rollout_id)) == []


async def test_an_unresponsive_attempt_may_not_report(
    gateway: Gateway, store: SqliteLightningStore, attempt: AttemptedRollout
) -> None:
    """The store fences an attempt its watchdog gave up on; its events used to be accepted."""
    await store.update_attempt(attempt.rollout_id, attempt.attempt.attempt_id, status="unresponsive")
    reward = {"event_type": "reward", "data": {"value": 1.0}}
    response = await post(
        events_url(gateway, attempt.rollout_id, attempt.attempt.attempt_id), headers=auth(gateway, attempt), json=reward
    )
    assert response.status_code == 409 and "already ended (unresponsive)" in response.json()["detail"]
    assert list(await store.query_spans(attempt.rollout_id)) == []


async def test_missing_or_wrong_key_is_401(gateway: Gateway, attempt: AttemptedRollout) -> None:
    url = events_url(gateway, attempt.rollout_id, attempt.attempt.attempt_id)
    reward = {"event_type": "reward", "data": {"value": 1.0}}
    other_key = {"Authorization": f"Bearer {gateway.key(attempt.rollout_id, 'at-other')}"}
    for headers in ({}, {"Authorization": "Basic abc"}, other_key):
        response = await post(url, headers=headers, json=reward)
        assert response.status_code == 401 and "AGL_KEY" in response.json()["detail"]


async def test_restart_keeps_acknowledged_events_and_keys(
    tmp_path: Path, make_gateway: Callable[..., Any], attempt: AttemptedRollout, store: SqliteLightningStore
) -> None:
    first = await make_gateway(secret="kept")
    url = first.event_url(attempt.rollout_id, attempt.attempt.attempt_id)
    headers = auth(first, attempt)
    assert (await post(url, headers=headers, json={"event_type": "step", "data": {"n": 1}})).status_code == 201
    await first.stop()
    reopened = SqliteLightningStore(tmp_path / "gateway.db")  # what a restarted service process would open
    try:
        second = await make_gateway(gateway_store=reopened, secret="kept")
        url = second.event_url(attempt.rollout_id, attempt.attempt.attempt_id)
        assert (
            await post(url, headers=headers, json={"event_type": "reward", "data": {"value": 0.5}})
        ).status_code == 201
        spans = list(await reopened.query_spans(attempt.rollout_id))
        assert [s.sequence_id for s in spans] == [1, 2]
        assert spans[0].attributes["n"] == 1 and find_final_reward(spans) == 0.5
    finally:
        await second.stop()
        await reopened.close()
