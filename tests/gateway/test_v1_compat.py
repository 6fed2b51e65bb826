"""v1.0's agents and operator calls against our gateway, with an upstream that (like vLLM) serves one name.

The agent (`tests/support/v1_contract_agent.py`) follows v1.0's contract: it never imports us, sends
`model="auto"` and posts its reward to `AGL_EVENT_URL`. The gateway must send the real model name.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

import agentlightning as agl
from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.emitter import find_final_reward
from agentlightning.gateway import Gateway, GatewayConfig
from agentlightning.store.sqlite import SqliteLightningStore
from agentlightning.types import AttemptedRollout, Span
from tests.support.openai_server import OpenAITestServer

from .conftest import auth, post

SERVED = "Qwen/Qwen2.5-1.5B-Instruct"
AGENT = f"{Path(__file__).resolve().parents[1] / 'support' / 'v1_contract_agent.py'}:V1ContractAgent"
CHAT = [{"role": "user", "content": "2 + 2?"}]


@pytest.fixture
def strict() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(model=SERVED, strict_model=True, always_return_token_ids=True) as server:
        yield server


def admin(gateway: Gateway) -> dict[str, str]:
    return {"Authorization": f"Bearer {gateway.admin_key}"}


async def test_auto_is_refused_by_the_strict_upstream_but_not_through_the_gateway(
    strict: OpenAITestServer, make_gateway: Callable[..., Any], attempt: AttemptedRollout
) -> None:
    direct = httpx.post(f"{strict.base_url}/chat/completions", json={"model": "auto", "messages": CHAT})
    assert direct.status_code == 404 and "does not exist" in direct.json()["error"]["message"]

    gateway = await make_gateway(upstreams=[strict.base_url], model_name=SERVED)
    base = gateway.openai_base_url(attempt.rollout_id, attempt.attempt.attempt_id, "train")
    for requested in ("auto", "gpt-4o", None):
        body: dict[str, Any] = {"messages": CHAT} if requested is None else {"model": requested, "messages": CHAT}
        answer = await post(f"{base}/chat/completions", headers=auth(gateway, attempt), json=body)
        assert answer.status_code == 200, answer.text
    assert [r["model"] for r in strict.requests] == [SERVED] * 3 and strict.rejected_models == ["auto"]
    listed = httpx.get(f"{base}/models", headers=auth(gateway, attempt)).json()
    assert [m["id"] for m in listed["data"]] == [SERVED]


@pytest.mark.slow
def test_a_v1_contract_agent_runs_through_process_agent_against_a_strict_upstream(
    tmp_path: Path, strict: OpenAITestServer
) -> None:
    """No gateway settings: `auto` becomes the model of the rollout's LLM resource."""
    store = SqliteLightningStore(tmp_path / "v1.db")
    agent = agl.ProcessAgent(agent_class=AGENT, env_map={"QUESTION": "question", "ANSWER": "answer"})
    trainer = agl.Trainer(
        algorithm=agl.Baseline(),
        store=store,
        n_runners=1,
        initial_resources={"llm": agl.LLM(endpoint=strict.base_url, model=SERVED)},
    )
    trainer.dev(agent, [{"question": "say 42", "answer": "42"}, {"question": "say 7", "answer": "7"}])

    import asyncio

    async def check() -> None:
        rollouts = list(await store.query_rollouts())
        assert len(rollouts) == 2 and {r.status for r in rollouts} == {"succeeded"}
        for rollout in rollouts:
            spans = list(await store.query_spans(rollout.rollout_id))
            assert find_final_reward(spans) == 1.0
            (triplet,) = TracerTraceToTriplet().adapt(spans)
            assert triplet.response["token_ids"], "token ids of the strict upstream's answer"
            llm = next(s for s in spans if s.name == "openai.chat.completion")
            assert llm.attributes["gen_ai.request.model"] == SERVED
            assert llm.attributes["agentlightning.gateway.requested_model"] == "auto"
        await store.close()

    asyncio.run(check())
    assert strict.rejected_models == [] and {r["model"] for r in strict.requests} == {SERVED}


async def test_registered_endpoints_route_calls_and_record_their_version(
    strict: OpenAITestServer, make_gateway: Callable[..., Any], attempt: AttemptedRollout, store: SqliteLightningStore
) -> None:
    gateway = await make_gateway(model_name=SERVED)
    models_url = f"{gateway.endpoint}/api/models"
    assert httpx.post(models_url, json=[{"model": SERVED, "endpoint": strict.base_url}]).status_code == 401
    entry = {"model": SERVED, "endpoint": strict.base_url, "version": 3}
    registered = httpx.post(models_url, json=[entry], headers=admin(gateway))
    assert registered.status_code == 201 and registered.json() == [entry]
    assert httpx.get(models_url, headers={"x-api-key": gateway.admin_key}).json() == [entry]
    bad = httpx.post(models_url, json=[{"model": SERVED, "endpoint": "not a url"}], headers=admin(gateway))
    assert bad.status_code == 422 and "endpoint" in bad.text

    base = gateway.openai_base_url(attempt.rollout_id, attempt.attempt.attempt_id, "train")
    answer = await post(
        f"{base}/chat/completions", headers=auth(gateway, attempt), json={"model": "auto", "messages": CHAT}
    )
    assert answer.status_code == 200, answer.text
    await gateway.stop()  # flushes the span
    (span,) = [s for s in await store.query_spans(attempt.rollout_id) if s.name == "openai.chat.completion"]
    assert span.attributes["agentlightning.gateway.model_version"] == 3
    # The raw request span v0.3's LLM proxy records under a call is part of that call, not another event.
    raw = Span.from_attributes(
        name="raw_gen_ai_request",
        attributes={"llm.hosted_vllm.prompt_token_ids": str(strict.responses[0]["prompt_token_ids"])},
        rollout_id=span.rollout_id,
        attempt_id=span.attempt_id,
        sequence_id=span.sequence_id,
        trace_id=span.trace_id,
        parent_id=span.span_id,
        start_time=span.start_time,
        end_time=span.end_time,
    )
    await store.add_span(raw)

    await gateway.start()
    # v1.0's event reading: the call as a `model_request` event, trimmed to token ids with format=triplet.
    events_url = f"{gateway.endpoint}/api/rollouts/{attempt.rollout_id}/events"
    (event,) = httpx.get(events_url, params={"format": "triplet"}, headers=admin(gateway)).json()
    assert event["event_type"] == "model_request" and event["data"]["status"] == "ok"
    assert event["data"]["prompt_token_ids"] == strict.responses[0]["prompt_token_ids"]
    assert event["data"]["response_token_ids"] == strict.responses[0]["choices"][0]["token_ids"]
    assert event["data"]["server"] == {"model": SERVED, "version": 3}
    assert httpx.delete(models_url, headers=admin(gateway)).json() == {"status": "ok"}
    other = await make_gateway()
    other.register_models([])
    assert httpx.get(models_url, headers=admin(gateway)).json() == []


async def test_no_endpoint_registered_for_the_model_is_503(
    strict: OpenAITestServer, make_gateway: Callable[..., Any], attempt: AttemptedRollout
) -> None:
    gateway = await make_gateway(model_name="other/model")
    httpx.post(
        f"{gateway.endpoint}/api/models", json=[{"model": SERVED, "endpoint": strict.base_url}], headers=admin(gateway)
    ).raise_for_status()
    base = gateway.openai_base_url(attempt.rollout_id, attempt.attempt.attempt_id, "train")
    answer = await post(f"{base}/chat/completions", headers=auth(gateway, attempt), json={"messages": CHAT})
    assert answer.status_code == 503 and "other/model" in answer.text


async def test_pause_holds_new_calls_until_resume(
    strict: OpenAITestServer, make_gateway: Callable[..., Any], attempt: AttemptedRollout
) -> None:
    gateway = await make_gateway(upstreams=[strict.base_url], model_name=SERVED)
    root = gateway.endpoint
    assert httpx.post(f"{root}/proxy/pause", json={}).status_code == 401
    state = httpx.post(f"{root}/proxy/pause", json={"retry_after_seconds": 2, "reason": "swap"}, headers=admin(gateway))
    assert state.json() == {"paused": True, "retry_after_seconds": 2, "reason": "swap", "inflight": 0}
    base = gateway.openai_base_url(attempt.rollout_id, attempt.attempt.attempt_id, "train")
    held = await post(f"{base}/chat/completions", headers=auth(gateway, attempt), json={"messages": CHAT})
    assert held.status_code == 429 and held.headers["retry-after"] == "2" and held.headers["x-agl-paused"] == "true"
    assert held.json() == {"error": "gateway paused", "reason": "swap"} and strict.requests == []
    resumed = httpx.post(f"{root}/proxy/resume", headers=admin(gateway)).json()
    assert resumed == {"paused": False, "retry_after_seconds": 2, "reason": None, "inflight": 0}
    ok = await post(f"{base}/chat/completions", headers=auth(gateway, attempt), json={"messages": CHAT})
    assert ok.status_code == 200 and httpx.get(f"{root}/proxy/state", headers=admin(gateway)).json()["inflight"] == 0
    assert httpx.post(f"{root}/proxy/pause", content=b"[1]", headers=admin(gateway)).status_code == 422


def test_pause_gates_link_a_gateway_to_a_policy_server() -> None:
    from agentlightning.web.pause import PauseGate

    server_gate, gateway_gate = PauseGate(1.0), PauseGate(5.0)
    gateway_gate.link(server_gate)
    server_gate.pause("swapping weights")
    assert gateway_gate.paused and gateway_gate.reason == "swapping weights"
    assert not gateway_gate.enter() and gateway_gate.rejected == 1
    gateway_gate.resume()
    assert not server_gate.paused and server_gate.enter()
    with pytest.raises(TimeoutError):
        server_gate.drain(timeout=0.05)
    server_gate.exit()
    assert server_gate.drain(timeout=1.0) >= 0


async def test_v1_events_path_takes_the_attempt_key_or_the_admin_key(
    make_gateway: Callable[..., Any], attempt: AttemptedRollout, store: SqliteLightningStore, backend: OpenAITestServer
) -> None:
    gateway = await make_gateway(upstreams=[backend.base_url])
    url = f"{gateway.endpoint}/api/rollouts/{attempt.rollout_id}/attempt/0/events"
    reward = {"event_type": "reward", "data": {"value": 0.5}}
    assert httpx.post(url, json=reward).status_code == 401
    answer = httpx.post(url, json=reward, headers=admin(gateway))
    assert answer.status_code == 200
    event = answer.json()
    assert event["attempt_id"] == attempt.attempt.attempt_id and event["data"] == {"value": 0.5}
    assert isinstance(event["timestamp"], float)
    own = f"{gateway.endpoint}/api/rollouts/{attempt.rollout_id}/attempt/{attempt.attempt.attempt_id}/events"
    assert httpx.post(own, json=reward, headers=auth(gateway, attempt)).status_code == 200
    assert find_final_reward(list(await store.query_spans(attempt.rollout_id))) == 0.5


async def test_v1_rollouts_rest_on_the_store(make_gateway: Callable[..., Any], store: SqliteLightningStore) -> None:
    gateway = await make_gateway()
    api = f"{gateway.endpoint}/api/rollouts"
    headers = admin(gateway)
    created = httpx.post(
        api,
        json=[{"input": {"data_id": "d1", "q": 1}, "rollout_id": "r-1"}, {"input": 2, "is_train": False}],
        headers=headers,
    )
    assert created.status_code == 201
    first, second = created.json()
    assert first["rollout_id"] == "r-1" and first["status"]["state"] == "queuing" and first["is_train"] is True
    assert first["config"]["timeout_seconds"] == 3600 and first["metadata"]["batch_idx"] is None
    assert second["is_train"] is False
    again = httpx.post(api, json=[{"input": "other", "rollout_id": "r-1"}], headers=headers).json()
    assert again[0]["input"] == {"data_id": "d1", "q": 1}, "idempotent per rollout_id"
    assert httpx.post(api, json={"input": 1}, headers=headers).status_code == 422
    listed = httpx.get(api, params={"state_in": ["queuing"]}, headers=headers).json()
    assert [r["rollout_id"] for r in listed] == ["r-1", second["rollout_id"]]
    assert httpx.get(api, headers=headers).status_code == 422

    illegal = httpx.patch(f"{api}/r-1", json={"status": {"state": "succeeded"}}, headers=headers)
    assert illegal.status_code == 409 and "cannot transition queuing -> succeeded" in illegal.text
    assert httpx.patch(f"{api}/r-1", json={"status": {"nope": 1}}, headers=headers).status_code == 422
    running = httpx.patch(f"{api}/r-1", json={"status": {"state": "running", "k8s_job_name": "j"}}, headers=headers)
    assert running.json()["status"]["state"] == "running" and running.json()["status"]["version"] == 2
    done = httpx.patch(f"{api}/r-1", json={"status": {"state": "succeeded"}}, headers=headers).json()
    assert done["status"]["state"] == "succeeded" and done["status"]["k8s_job_name"] == "j"
    terminal = httpx.get(f"{api}/terminal", headers=headers).json()
    assert terminal["items"] == [{"rollout_id": "r-1", "state": "succeeded", "data_id": "d1", "is_train": True}]
    assert terminal["next_after"] == 1 and terminal["total_terminal"] == 1
    one = httpx.get(f"{api}/r-1", headers=headers).json()
    assert one["rollout"]["rollout_id"] == "r-1" and isinstance(one["attempts"], list)
    assert httpx.get(f"{api}/r-1/events", headers=headers).json() == []

    assert httpx.delete(f"{api}/r-1", headers=headers).status_code == 204
    missing = httpx.get(f"{api}/r-1", headers=headers)
    assert missing.status_code == 404 and missing.json() == {"detail": "Rollout not found: r-1"}
    assert httpx.delete(f"{api}/unknown", headers=headers).status_code == 204


def test_cli_takes_a_model_name_and_an_admin_key() -> None:
    from agentlightning.cli.gateway import build_parser

    args = build_parser().parse_args(["--model-name", SERVED, "--admin-key", "k"])
    assert (args.model_name, args.admin_key) == (SERVED, "k")
    assert sys.executable
    with pytest.raises(ValueError, match="model_name"):
        GatewayConfig(model_name=" ")
