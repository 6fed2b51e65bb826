"""Never a silent zero: a rollout given an LLM that records no LLM call is flagged, warned about once per agent,
counted by the adapter's report, and left alone when its calls were captured (by the tracer or the proxy)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import openai
import pytest

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.emitter import emit_reward
from agentlightning.litagent import llm_rollout, prompt_rollout
from agentlightning.llm_proxy import LLMProxy
from agentlightning.runner import LitAgentRunner
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import LLM, PromptTemplate
from tests.support.openai_server import OpenAITestServer


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(always_return_token_ids=True) as srv:
        yield srv


@llm_rollout
def raw_http_agent(task: str, llm: LLM) -> None:
    """Calls the model with a plain HTTP client, which no tracer instruments."""
    body = {"model": llm.model, "messages": [{"role": "user", "content": task}]}
    httpx.post(f"{llm.endpoint}/chat/completions", json=body, timeout=10).raise_for_status()
    emit_reward(1.0)


@llm_rollout
def openai_agent(task: str, llm: LLM) -> None:
    client = openai.OpenAI(base_url=llm.endpoint, api_key="k")
    client.chat.completions.create(model=llm.model, messages=[{"role": "user", "content": task}])
    emit_reward(1.0)


@llm_rollout
def proxied_raw_http_agent(task: str, llm: LLM) -> None:
    """Raw HTTP again, but through the LLM proxy's rollout URL (the ProxyLLM resolved for this rollout)."""
    assert "/rollout/" in llm.endpoint
    body = {"model": llm.model, "messages": [{"role": "user", "content": task}]}
    httpx.post(f"{llm.endpoint}/chat/completions", json=body, timeout=10).raise_for_status()


async def test_zero_llm_spans_are_flagged_in_metadata_warned_once_and_counted(
    server: OpenAITestServer, caplog: pytest.LogCaptureFixture
) -> None:
    store = InMemoryLightningStore()
    runner: LitAgentRunner[str] = LitAgentRunner(OtelTracer(), heartbeat_interval=0)
    llm = LLM(endpoint=server.base_url, model="test-model")
    with caplog.at_level(logging.WARNING, logger="agentlightning.runner.agent"):
        with runner.run_context(agent=raw_http_agent, store=store):
            first = await runner.step("hello", resources={"policy": llm})
            second = await runner.step("again", resources={"policy": llm})
    assert len(server.requests) >= 2  # the model was called, just not seen
    for rollout in (first, second):
        stored = await store.get_rollout_by_id(rollout.rollout_id)
        assert stored is not None and stored.status == "succeeded"
        assert stored.metadata["llm_spans"] == 0
        assert "'policy'" in stored.metadata["llm_spans_hint"]
        assert "instruments" in stored.metadata["llm_spans_hint"]
        spans = list(await store.query_spans(rollout.rollout_id))
        triplets, report = TracerTraceToTriplet().adapt_with_report(spans)
        assert triplets == [] and report.no_llm_spans
        assert report.drop_counts["no_llm_spans"] == 1
        assert report.to_metadata()["drop_counts"]["no_llm_spans"] == 1
    warnings = [r for r in caplog.records if "zero LLM spans" in r.getMessage()]
    assert len(warnings) <= 1  # once per agent class for the process (another test may have warned first)


async def test_captured_calls_leave_the_metadata_alone(server: OpenAITestServer) -> None:
    store = InMemoryLightningStore()
    runner: LitAgentRunner[str] = LitAgentRunner(OtelTracer(), heartbeat_interval=0)
    with runner.run_context(agent=openai_agent, store=store):
        rollout = await runner.step("hello", resources={"policy": LLM(endpoint=server.base_url, model="m")})
    stored = await store.get_rollout_by_id(rollout.rollout_id)
    assert stored is not None and "llm_spans" not in (stored.metadata or {})
    report = TracerTraceToTriplet().adapt_with_report(list(await store.query_spans(rollout.rollout_id)))[1]
    assert "no_llm_spans" not in report.drop_counts


async def test_calls_recorded_by_the_proxy_count(server: OpenAITestServer) -> None:
    store = InMemoryLightningStore(thread_safe=True)
    entry = {"model_name": "policy", "litellm_params": {"model": "hosted_vllm/m", "api_base": server.base_url}}
    proxy = LLMProxy(model_list=[entry], store=store, launch_mode="thread")  # type: ignore[list-item]
    await proxy.start()
    try:
        runner: LitAgentRunner[str] = LitAgentRunner(OtelTracer(), heartbeat_interval=0)
        with runner.run_context(agent=proxied_raw_http_agent, store=store):
            rollout = await runner.step("hello", resources={"policy": proxy.as_resource(model="policy")})
    finally:
        await proxy.stop()
    stored = await store.get_rollout_by_id(rollout.rollout_id)
    assert stored is not None and stored.status == "succeeded"
    assert "llm_spans" not in (stored.metadata or {})


async def test_no_llm_resource_means_no_flag(server: OpenAITestServer) -> None:
    @prompt_rollout
    def no_llm(task: str, prompt_template: PromptTemplate) -> None:
        emit_reward(0.5)

    store = InMemoryLightningStore()
    runner: LitAgentRunner[str] = LitAgentRunner(OtelTracer(), heartbeat_interval=0)
    with runner.run_context(agent=no_llm, store=store):
        done = await runner.step("hello", resources={"notes": PromptTemplate(template="x")})
    stored = await store.get_rollout_by_id(done.rollout_id)
    assert stored is not None and "llm_spans" not in (stored.metadata or {})
