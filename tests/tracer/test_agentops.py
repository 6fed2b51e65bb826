"""AgentOpsTracer: works with no account and no network, and its LLM spans carry token ids."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.base import clear_active_tracer
from tests.support.openai_server import OpenAITestServer

pytestmark = pytest.mark.agentops

agentops = pytest.importorskip("agentops", reason="needs the agentops extra: pip install agentlightning[agentops]")

from agentlightning.instrumentation.agentops import is_agentops_service_enabled  # noqa: E402
from agentlightning.tracer.agentops import AgentOpsTracer  # noqa: E402


@pytest.fixture
def network_attempts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Refuse and record every connection or DNS lookup that leaves 127.0.0.1 (from any thread)."""
    attempts: list[Any] = []
    original_connect = socket.socket.connect
    original_getaddrinfo = socket.getaddrinfo

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else address
        if host not in ("127.0.0.1", "localhost", "::1") and self.family != socket.AF_UNIX:
            attempts.append(address)
            raise OSError(f"test forbids network access to {address!r}")
        return original_connect(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "localhost", "::1", None):
            attempts.append(host)
            raise OSError(f"test forbids resolving {host!r}")
        return original_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    return attempts


@pytest.fixture
def agentops_tracer(network_attempts: list[Any]) -> Iterator[tuple[AgentOpsTracer, InMemoryLightningStore]]:
    store = InMemoryLightningStore()
    tracer = AgentOpsTracer()
    tracer.init_worker(0, store)
    yield tracer, store
    tracer.teardown_worker(0)
    clear_active_tracer()


async def test_llm_calls_become_single_spans_with_token_ids_offline(
    agentops_tracer: tuple[AgentOpsTracer, InMemoryLightningStore], network_attempts: list[Any]
) -> None:
    tracer, store = agentops_tracer
    assert agentops.get_client().initialized and not is_agentops_service_enabled()
    with OpenAITestServer(always_return_token_ids=True) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test")
        attempted = await store.start_rollout(input="q")
        async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])
            stream = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "again"}], stream=True
            )
            for _ in stream:
                pass
            tracer.create_span("agentlightning.annotation", {"agentlightning.reward.0.value": 1.0})
        # Let AgentOps' background processors flush: their exporters must stay offline.
        agentops_core = __import__("agentops.sdk.core", fromlist=["tracer"])
        agentops_core.tracer._flush_span_processors()

    spans = list(await store.query_spans(attempted.rollout_id))
    llm_spans = [s for s in spans if s.name == "openai.chat.completion"]
    assert len(llm_spans) == 2
    for span, served in zip(llm_spans, server.responses, strict=True):
        assert span.attributes["prompt_token_ids"] == served["prompt_token_ids"]
        assert span.attributes["response_token_ids"] == served["choices"][0]["token_ids"]
    assert [s.sequence_id for s in spans] == sorted(s.sequence_id for s in spans)
    assert network_attempts == []


async def test_spans_of_agentops_own_instrumentation_reach_the_store(
    agentops_tracer: tuple[AgentOpsTracer, InMemoryLightningStore], network_attempts: list[Any]
) -> None:
    tracer, store = agentops_tracer

    @agentops.operation
    def plan(task: str) -> str:
        return task.upper()

    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        assert plan("go") == "GO"
    names = [s.name for s in await store.query_spans(attempted.rollout_id)]
    assert any("plan" in name for name in names), names
    assert network_attempts == []


def test_langchain_handler_needs_langchain(agentops_tracer: tuple[AgentOpsTracer, InMemoryLightningStore]) -> None:
    tracer, _ = agentops_tracer
    from agentlightning.instrumentation import AGENTOPS_LANGCHAIN_INSTALLED

    if AGENTOPS_LANGCHAIN_INSTALLED:
        handler = tracer.get_langchain_handler(tags=["t"])
        assert type(handler).__name__ == "LangchainCallbackHandler"
    else:
        with pytest.raises(ImportError, match="langchain"):
            tracer.get_langchain_handler()


def test_agentops_tracer_pickles_without_runtime_state(
    agentops_tracer: tuple[AgentOpsTracer, InMemoryLightningStore],
) -> None:
    import pickle

    tracer, _ = agentops_tracer
    clone = pickle.loads(pickle.dumps(tracer))
    assert isinstance(clone, AgentOpsTracer)
    assert clone.agentops_managed and clone.instrument_managed and clone.span_processor is None


async def test_trace_context_records_an_agentops_session_span_beside_the_agents_spans(
    agentops_tracer: tuple[AgentOpsTracer, InMemoryLightningStore], network_attempts: list[Any]
) -> None:
    # As v0.3: the trace context starts an AgentOps trace named after the rollout.
    tracer, store = agentops_tracer
    attempted = await store.start_rollout(input="q")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        tracer.create_span("agentlightning.message", {"agentlightning.message.body": "hi"})
    spans = list(await store.query_spans(attempted.rollout_id))
    sessions = [s for s in spans if s.name.endswith(".session")]
    assert [s.name for s in sessions] == [f"{attempted.rollout_id}.session"], [s.name for s in spans]
    assert "agentlightning.message" in [s.name for s in spans]
    with pytest.raises(RuntimeError, match="agent failed"):
        async with tracer.trace_context("named"):
            raise RuntimeError("agent failed")
    (failed,) = [s for s in tracer.get_last_trace() if s.name == "named.session"]
    end_states = {k: v for k, v in failed.attributes.items() if k.endswith("end_state")}
    assert end_states and all("ERROR" in str(v).upper() for v in end_states.values()), failed.attributes
    assert network_attempts == []
    assert tracer.get_langchain_callback_handler == tracer.get_langchain_handler
