"""LLMProxy lifecycle and configuration: resources, start/stop/restart, model-list updates, launch modes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import openai
import pytest

from agentlightning.llm_proxy import LLMProxy
from agentlightning.llm_proxy.proxy import PROXY_API_KEY, get_active_llm_proxy
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.store_http.server import LightningStoreServer
from agentlightning.types import LLM, AttemptedRollout, ProxyLLM
from tests.support.openai_server import OpenAITestServer

from .conftest import call_spans, model_entry

HI: list[Any] = [{"role": "user", "content": "hi"}]


async def ask(base_url: str, model: str = "policy") -> str:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    reply = await client.chat.completions.create(model=model, messages=HI)
    return str(reply.choices[0].message.content)


# ---- resources ----


async def test_as_resource_without_ids_is_a_proxy_llm_that_routes_per_rollout(proxy: LLMProxy):
    resource = proxy.as_resource(sampling_parameters={"temperature": 0.7})
    assert isinstance(resource, ProxyLLM)
    assert resource.get_base_url() == f"{proxy.endpoint}/v1"
    assert resource.get_base_url("ro-1", "at-1") == f"{proxy.endpoint}/rollout/ro-1/attempt/at-1/v1"
    assert (resource.model, resource.api_key, resource.sampling_parameters) == (
        "policy",
        PROXY_API_KEY,
        {"temperature": 0.7},
    )


async def test_as_resource_with_ids_is_a_routed_llm(proxy: LLMProxy):
    resource = proxy.as_resource("ro-1", "at-2", model="policy")
    assert type(resource) is LLM
    assert resource.endpoint == f"{proxy.endpoint}/rollout/ro-1/attempt/at-2/v1"
    assert await ask(resource.endpoint) == "Echo: hi"


async def test_as_resource_rejects_half_ids_and_unknown_or_ambiguous_models(make_proxy: Any, backend: OpenAITestServer):
    proxy = await make_proxy([model_entry("a", backend), model_entry("b", backend)])
    with pytest.raises(ValueError, match="must be given together"):
        proxy.as_resource("ro-1", None, model="a")
    with pytest.raises(ValueError, match=r"serves several models \['a', 'b'\]; pass model="):
        proxy.as_resource()
    with pytest.raises(ValueError, match="model 'c' is not served by this proxy"):
        proxy.as_resource(model="c")


def test_as_resource_needs_a_port():
    entry = {"model_name": "x", "litellm_params": {"model": "hosted_vllm/x", "api_base": "http://h:1"}}
    proxy = LLMProxy(model_list=[entry], launch_mode="thread")  # type: ignore[list-item]
    with pytest.raises(RuntimeError, match=r"start\(\) it first or pass port="):
        proxy.as_resource()
    assert LLMProxy(port=4000, host="0.0.0.0", launch_mode="thread").endpoint.startswith("http://")


# ---- lifecycle ----


async def test_start_stop_restart_keep_the_port_and_track_the_active_proxy(
    backend: OpenAITestServer, store: InMemoryLightningStore
):
    proxy = LLMProxy(model_list=[model_entry("policy", backend)], store=store, launch_mode="thread")
    assert not proxy.is_running()
    await proxy.start()
    try:
        endpoint = proxy.endpoint
        assert proxy.is_running() and get_active_llm_proxy() is proxy
        with pytest.raises(RuntimeError, match="already running"):
            await proxy.start()
        await proxy.restart()
        assert proxy.is_running() and proxy.endpoint == endpoint
        assert await ask(f"{endpoint}/v1") == "Echo: hi"
    finally:
        await proxy.stop()
    assert not proxy.is_running() and get_active_llm_proxy() is None
    await proxy.stop()  # idempotent


async def test_update_model_list_takes_effect_at_once_on_a_running_proxy(make_proxy: Any):
    with OpenAITestServer(lambda _: "from old") as old, OpenAITestServer(lambda _: "from new") as new:
        proxy = await make_proxy([model_entry("policy", old)])
        base = f"{proxy.endpoint}/v1"
        assert await ask(base) == "from old"
        proxy.update_model_list([model_entry("policy", new), model_entry("judge", new)])
        assert await ask(base) == "from new"
        assert await ask(base, "judge") == "from new"
        with pytest.raises(ValueError, match="needs litellm_params.model"):
            proxy.update_model_list([{"model_name": "broken", "litellm_params": {}}])
        assert await ask(base) == "from new"  # a rejected list changes nothing


async def test_set_store_redirects_spans_of_a_running_proxy(proxy: LLMProxy, attempt: AttemptedRollout):
    other = InMemoryLightningStore(thread_safe=True)
    other_attempt = await other.start_rollout(input="elsewhere")
    proxy.set_store(other)
    assert proxy.get_store() is other
    await ask(proxy.as_resource(other_attempt.rollout_id, other_attempt.attempt.attempt_id).endpoint)
    assert len(call_spans(await other.query_spans(other_attempt.rollout_id))) == 1


async def test_asyncio_mode_serves_from_the_callers_loop_with_a_plain_store(backend: OpenAITestServer):
    store = InMemoryLightningStore()  # not thread-safe: fine, everything runs on this loop
    attempt = await store.start_rollout(input="x")
    proxy = LLMProxy(model_list=[model_entry("policy", backend)], store=store, launch_mode="asyncio")
    await proxy.start()
    try:
        assert await ask(proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id).endpoint) == "Echo: hi"
    finally:
        await proxy.stop()
    assert len(call_spans(await store.query_spans(attempt.rollout_id))) == 1


async def test_thread_mode_warns_about_a_store_that_is_not_thread_safe(
    backend: OpenAITestServer, caplog: pytest.LogCaptureFixture
):
    proxy = LLMProxy(model_list=[model_entry("policy", backend)], store=InMemoryLightningStore(), launch_mode="thread")
    with caplog.at_level(logging.WARNING, logger="agentlightning.llm_proxy.proxy"):
        proxy.initialize()
    assert "which is not thread-safe" in caplog.text


# ---- a proxy in its own process ----


async def test_mp_mode_refuses_a_store_held_in_this_process(backend: OpenAITestServer):
    proxy = LLMProxy(model_list=[model_entry("policy", backend)], store=InMemoryLightningStore(), launch_mode="mp")
    with pytest.raises(ValueError, match="cannot write to the InMemoryLightningStore held in this one"):
        await proxy.start()
    server = LightningStoreServer(InMemoryLightningStore(thread_safe=True), port=0)
    proxy = LLMProxy(model_list=[model_entry("policy", backend)], store=server, launch_mode="mp")
    with pytest.raises(ValueError, match="start the store server before the mp-mode LLM proxy"):
        await proxy.start()


async def test_mp_mode_records_spans_through_the_store_server_and_restarts_on_update(backend: OpenAITestServer):
    server = LightningStoreServer(InMemoryLightningStore(thread_safe=True), port=0, launch_mode="thread")
    await server.start()
    proxy = LLMProxy(model_list=[model_entry("policy", backend)], store=server, launch_mode="mp")
    try:
        attempt = await server.start_rollout(input="x")
        await proxy.start()
        routed = proxy.as_resource(attempt.rollout_id, attempt.attempt.attempt_id).endpoint
        assert await ask(routed) == "Echo: hi"
        client = openai.AsyncOpenAI(base_url=routed, api_key="unused", max_retries=0)
        stream = await client.chat.completions.create(model="policy", messages=HI, stream=True)
        assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == "Echo: hi"
        spans = call_spans(await server.query_spans(attempt.rollout_id))
        assert [s.sequence_id for s in spans] == [1, 2]
        assert all(s.attributes["response_token_ids"] for s in spans)

        endpoint = proxy.endpoint
        proxy.update_model_list([model_entry("renamed", backend)])  # the child process is restarted
        assert proxy.is_running() and proxy.endpoint == endpoint
        assert await ask(routed, "renamed") == "Echo: hi"
        assert len(call_spans(await server.query_spans(attempt.rollout_id))) == 3
    finally:
        await proxy.stop()
        await server.stop()


# ---- configuration ----


def test_unknown_middleware_or_callback_aliases_name_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown LLM proxy middleware 'gzip'; use one of \['message_inspection'"):
        LLMProxy(middlewares=["gzip"])
    with pytest.raises(ValueError, match=r"unknown LLM proxy callback 'langfuse'; use one of \['logprobs'"):
        LLMProxy(callbacks=["langfuse"])


def test_launch_settings_are_validated_when_constructed():
    with pytest.raises(ValueError, match="launch_mode must be one of"):
        LLMProxy(launch_mode="process")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs launch_mode='mp'"):
        LLMProxy(num_workers=2, launch_mode="thread")
    with pytest.raises(ValueError, match="num_retries must be >= 0"):
        LLMProxy(num_retries=-1)


def test_litellm_config_supplies_the_model_list_and_retries(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("agentlightning.llm_proxy.proxy.litellm_available", lambda: False)
    config = {
        "model_list": [{"model_name": "m", "litellm_params": {"model": "hosted_vllm/x", "api_base": "http://h:1"}}],
        "litellm_settings": {"num_retries": 3, "request_timeout": 30, "drop_params": True},
        "general_settings": {"master_key": "sk-1"},
    }
    with caplog.at_level(logging.WARNING, logger="agentlightning.llm_proxy.proxy"):
        proxy = LLMProxy(litellm_config=config, launch_mode="thread")
    assert [entry["model_name"] for entry in proxy.model_list] == ["m"]
    assert (proxy.num_retries, proxy.request_timeout) == (3, 30.0)
    assert "['general_settings', 'litellm_settings.drop_params']" in caplog.text


def test_public_names():
    import agentlightning
    import agentlightning.llm_proxy as llm_proxy

    assert llm_proxy.__all__ == ["LLMProxy"]
    assert agentlightning.LLMProxy is LLMProxy
    for name in ("LightningSpanExporter", "StreamConversionMiddleware", "ModelConfig", "get_active_llm_proxy"):
        assert getattr(llm_proxy, name).__name__ == name


async def test_a_paused_proxy_holds_new_calls_until_resumed(make_proxy: Any, backend: OpenAITestServer):
    """The VERL trainer pauses the proxy while its replicas sleep: calls wait instead of failing."""
    proxy = await make_proxy([model_entry("policy", backend)])
    proxy.gate.pause("training step")
    call = asyncio.ensure_future(ask(f"{proxy.endpoint}/v1"))
    for _ in range(100):  # bounded: until the call is waiting at the gate
        await asyncio.sleep(0.02)
    assert not call.done() and backend.requests == [] and proxy.gate.inflight == 0
    proxy.gate.resume()
    assert await asyncio.wait_for(call, 30) == "Echo: hi"
    # the reply can reach the client a moment before the server's handler leaves the gate
    await asyncio.to_thread(proxy.gate.drain, 30)
    assert proxy.gate.inflight == 0 and len(backend.requests) == 1
