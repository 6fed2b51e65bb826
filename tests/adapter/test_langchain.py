"""Real LangChain `ChatOpenAI` calls -> tracer -> InMemoryLightningStore -> exactly one triplet per LLM call.

Every call style LangChain offers on an OpenAI-compatible server is covered: `invoke`, `stream`, tool
binding, and `with_structured_output` through json_schema (`chat.completions.parse`), function calling and
json mode (also `parse`), streamed and async. A structured-output call that no tracer sees would silently
cost its training sample, so the tests compare each triplet with what the server actually returned.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.emitter.reward import emit_reward
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.base import clear_active_tracer
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import Span, Triplet
from tests.support.network import block_external_network
from tests.support.openai_server import OpenAITestServer, Reply, ReplyLike, ToolCall

pytestmark = [pytest.mark.langchain, pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")]

langchain_openai = pytest.importorskip(
    "langchain_openai", reason="needs the langchain extra: pip install agentlightning[langchain]"
)
from langchain_core.runnables import RunnableLambda  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

ChatOpenAI = langchain_openai.ChatOpenAI


class Weather(BaseModel):
    city: str
    temperature: int


@tool
def get_weather(city: str) -> str:
    """Current weather of a city."""
    return f"sunny in {city}"


def respond(request: dict[str, Any]) -> ReplyLike:
    """Answer like a model would: JSON for response formats, the forced tool, a tool call, then text."""
    if request.get("response_format"):
        return json.dumps({"city": "Oslo", "temperature": 21})
    tool_choice = request.get("tool_choice")
    if isinstance(tool_choice, dict):
        forced = tool_choice["function"]["name"]
        return Reply(tool_calls=[ToolCall(name=forced, arguments={"city": "Oslo", "temperature": 21})])
    if request.get("tools") and request["messages"][-1]["role"] != "tool":
        return Reply(tool_calls=[ToolCall(name="get_weather", arguments={"city": "Oslo"})])
    return "It is sunny in Oslo."


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(respond) as server:
        yield server


@pytest.fixture
def store() -> InMemoryLightningStore:
    return InMemoryLightningStore()


@pytest.fixture
def tracer(store: InMemoryLightningStore) -> Iterator[OtelTracer]:
    tracer = OtelTracer()
    tracer.init_worker(0, store)
    yield tracer
    tracer.teardown_worker(0)
    clear_active_tracer()


@pytest.fixture
def network_attempts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    return block_external_network(monkeypatch)


def _make_tracer(kind: str) -> OtelTracer:
    if kind == "agentops":
        pytest.importorskip("agentops", reason="needs the agentops extra: pip install agentlightning[agentops]")
        from agentlightning.tracer.agentops import AgentOpsTracer

        return AgentOpsTracer()
    return OtelTracer()


@pytest.fixture(params=["otel", pytest.param("agentops", marks=pytest.mark.agentops)])
def traced(
    request: pytest.FixtureRequest, network_attempts: list[Any]
) -> Iterator[tuple[OtelTracer, InMemoryLightningStore]]:
    store = InMemoryLightningStore()
    tracer = _make_tracer(request.param)
    tracer.init_worker(0, store)
    yield tracer, store
    tracer.teardown_worker(0)
    clear_active_tracer()


def _chat(server: OpenAITestServer) -> Any:
    # `return_token_ids` is what a vLLM server needs to return token ids; it must reach every request.
    return ChatOpenAI(
        base_url=server.base_url, api_key="x", model="policy-model", extra_body={"return_token_ids": True}
    )


async def _adapt(store: InMemoryLightningStore, rollout_id: str, **kwargs: Any) -> tuple[list[Triplet], Any]:
    spans: list[Span] = list(await store.query_spans(rollout_id))
    return TracerTraceToTriplet(**kwargs).adapt_with_report(spans)


def _assert_triplets_match_served(triplets: list[Triplet], server: OpenAITestServer) -> None:
    assert len(triplets) == len(server.responses)
    for triplet, served in zip(triplets, server.responses, strict=True):
        assert triplet.prompt["token_ids"] == served["prompt_token_ids"]
        assert triplet.response["token_ids"] == served["choices"][0]["token_ids"]
        assert triplet.metadata["response_id"] == served["id"]


async def test_every_sync_call_style_becomes_exactly_one_triplet(
    traced: tuple[OtelTracer, InMemoryLightningStore], server: OpenAITestServer, network_attempts: list[Any]
) -> None:
    tracer, store = traced
    llm = _chat(server)
    attempted = await store.start_rollout(input="weather")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        assert llm.invoke("hello").content == "It is sunny in Oslo."
        assert "".join(str(chunk.content) for chunk in llm.stream("stream it")) == "It is sunny in Oslo."
        tool_message = llm.bind_tools([get_weather]).invoke("weather in Oslo?")
        assert tool_message.tool_calls[0]["name"] == "get_weather"
        expected = Weather(city="Oslo", temperature=21)
        assert llm.with_structured_output(Weather).invoke("as json schema") == expected
        assert llm.with_structured_output(Weather, method="function_calling").invoke("as a tool") == expected
        assert llm.with_structured_output(Weather, method="json_mode").invoke("as json, json") == expected
        assert list(llm.with_structured_output(Weather).stream("streamed schema"))[-1] == expected
        emit_reward(1.0)

    triplets, report = await _adapt(store, attempted.rollout_id)
    assert len(server.requests) == 7
    assert all(request.get("return_token_ids") is True for request in server.requests)
    assert [r.get("response_format", {}).get("type") for r in server.requests] == [
        None,
        None,
        None,
        "json_schema",
        None,
        "json_object",
        "json_schema",
    ]
    _assert_triplets_match_served(triplets, server)
    assert [t.reward for t in triplets] == [None] * 6 + [1.0]
    assert report.dropped == [] and report.unmatched_rewards == []
    assert report.n_llm_spans == 7 and report.n_triplets == 7
    # Structured answers are kept as the model wrote them (JSON text or a tool call).
    assert json.loads(triplets[3].response["raw_content"][0]["content"]) == {"city": "Oslo", "temperature": 21}
    assert triplets[4].response["raw_content"][0]["tool_calls"][0]["name"] == "Weather"
    assert network_attempts == []


async def test_every_async_call_style_becomes_exactly_one_triplet(
    traced: tuple[OtelTracer, InMemoryLightningStore], server: OpenAITestServer, network_attempts: list[Any]
) -> None:
    tracer, store = traced
    llm = _chat(server)
    attempted = await store.start_rollout(input="weather")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        assert (await llm.ainvoke("hello")).content == "It is sunny in Oslo."
        assert "".join([str(chunk.content) async for chunk in llm.astream("stream it")]) == "It is sunny in Oslo."
        tool_message = await llm.bind_tools([get_weather]).ainvoke("weather in Oslo?")
        assert tool_message.tool_calls[0]["args"] == {"city": "Oslo"}
        expected = Weather(city="Oslo", temperature=21)
        assert await llm.with_structured_output(Weather).ainvoke("as json schema") == expected
        assert await llm.with_structured_output(Weather, method="function_calling").ainvoke("as a tool") == expected
        assert await llm.with_structured_output(Weather, method="json_mode").ainvoke("as json, json") == expected
        chunks = [chunk async for chunk in llm.with_structured_output(Weather).astream("streamed schema")]
        assert chunks[-1] == expected
        emit_reward(0.5)

    triplets, report = await _adapt(store, attempted.rollout_id)
    assert len(server.requests) == 7
    _assert_triplets_match_served(triplets, server)
    assert [t.reward for t in triplets] == [None] * 6 + [0.5]
    assert report.dropped == [] and report.unmatched_rewards == []
    assert network_attempts == []


def _agents(llm: Any) -> tuple[Any, Any]:
    """A structured-output planner and a tool-using worker, as named LangChain runnables."""
    planner = (RunnableLambda(lambda task: f"Plan: {task}") | llm.with_structured_output(Weather)).with_config(
        run_name="planner"
    )

    def work(question: str) -> str:
        request = llm.bind_tools([get_weather]).invoke(question)
        observation = get_weather.invoke(request.tool_calls[0])
        return str(llm.invoke([("user", question), request, observation]).content)

    return planner, RunnableLambda(work).with_config(run_name="worker")


async def test_otel_langchain_handler_names_the_agent_of_each_call(
    store: InMemoryLightningStore, tracer: OtelTracer, server: OpenAITestServer
) -> None:
    planner, worker = _agents(_chat(server))
    handler = tracer.get_langchain_handler()
    config: Any = {"callbacks": [handler]}
    attempted = await store.start_rollout(input="weather")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        assert planner.invoke("Oslo", config=config) == Weather(city="Oslo", temperature=21)
        assert worker.invoke("Weather in Oslo?", config=config) == "It is sunny in Oslo."
        assert await worker.ainvoke("Weather in Oslo?", config=config) == "It is sunny in Oslo."
        emit_reward(1.0)

    spans = list(await store.query_spans(attempted.rollout_id))
    chains = {s.attributes["langchain.chain.type"] for s in spans if s.name == "langchain.chain"}
    assert {"planner", "worker"} <= chains
    tools = [s for s in spans if s.name == "langchain.tool"]
    assert [s.attributes["tool.name"] for s in tools] == ["get_weather", "get_weather"]
    assert tools[0].attributes["langchain.tool.output"] == "sunny in Oslo"
    # LangChain ends async runs in another context: later spans must not hang under the finished chain.
    (reward_span,) = [s for s in spans if s.name == "agentlightning.annotation"]
    assert reward_span.parent_id is None

    triplets, report = await _adapt(store, attempted.rollout_id)
    _assert_triplets_match_served(triplets, server)
    assert [t.metadata["agent_name"] for t in triplets] == ["planner"] + ["worker"] * 4
    assert report.dropped == [] and triplets[-1].reward == 1.0

    worker_triplets, worker_report = await _adapt(store, attempted.rollout_id, agent_match="^worker$")
    assert [t.metadata["response_id"] for t in worker_triplets] == [r["id"] for r in server.responses[1:]]
    assert [d.reason for d in worker_report.dropped] == ["agent_filtered"]


async def test_otel_langchain_handler_records_failed_chains(store: InMemoryLightningStore, tracer: OtelTracer) -> None:
    def fail(_: str) -> str:
        raise RuntimeError("tool exploded")

    failing = RunnableLambda(fail).with_config(run_name="failing-agent")
    attempted = await store.start_rollout(input="x")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        with pytest.raises(RuntimeError, match="tool exploded"):
            failing.invoke("x", config={"callbacks": [tracer.get_langchain_handler()]})
    (span,) = await store.query_spans(attempted.rollout_id)
    assert span.name == "langchain.chain" and span.attributes["langchain.chain.type"] == "failing-agent"
    assert span.status.status_code == "ERROR"
    assert span.attributes["exception.type"] == "RuntimeError"


@pytest.mark.agentops
async def test_agentops_langchain_handler_names_chains_and_keeps_one_triplet_per_call(
    server: OpenAITestServer, network_attempts: list[Any]
) -> None:
    pytest.importorskip("agentops", reason="needs the agentops extra: pip install agentlightning[agentops]")
    from agentlightning.tracer.agentops import AgentOpsTracer

    store = InMemoryLightningStore()
    tracer = AgentOpsTracer()
    tracer.init_worker(0, store)
    try:
        planner, worker = _agents(_chat(server))
        config: Any = {"callbacks": [tracer.get_langchain_handler()]}
        attempted = await store.start_rollout(input="weather")
        async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
            planner.invoke("Oslo", config=config)
            worker.invoke("Weather in Oslo?", config=config)
            emit_reward(1.0)
    finally:
        tracer.teardown_worker(0)
        clear_active_tracer()

    spans = list(await store.query_spans(attempted.rollout_id))
    chain_types = {s.attributes.get("langchain.chain.type") for s in spans if "langchain.chain.type" in s.attributes}
    assert {"planner", "worker"} <= chain_types and "unknown_chain" not in chain_types
    # AgentOps' handler records each chat model run too: the same call seen twice is merged, never lost.
    triplets, report = await _adapt(store, attempted.rollout_id)
    _assert_triplets_match_served(triplets, server)
    assert report.lost_llm_calls == [] and report.unmatched_rewards == []
    assert {d.reason for d in report.dropped} <= {"nested_llm_call", "duplicate"}
    assert triplets[-1].reward == 1.0
    worker_triplets, _ = await _adapt(store, attempted.rollout_id, agent_match="^worker$")
    assert [t.metadata["response_id"] for t in worker_triplets] == [r["id"] for r in server.responses[1:]]
    assert network_attempts == []
