"""WeaveTracer: Weave ops and Weave's OpenAI integration become stored spans, offline, without W&B."""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.emitter.reward import emit_reward
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.base import clear_active_tracer, get_active_tracer
from agentlightning.types import Span
from tests.support.network import block_external_network
from tests.support.openai_server import OpenAITestServer

pytestmark = [
    pytest.mark.weave,
    # Weave's own serialization of OpenAI client objects warns about a lock type; not ours to fix.
    pytest.mark.filterwarnings("ignore:.*is not a Python type.*"),
]

weave = pytest.importorskip("weave", reason="needs the weave extra: pip install agentlightning[weave]")

from weave.trace.context import weave_client_context  # noqa: E402

from agentlightning.tracer.weave import SESSION_ATTRIBUTE, WeaveTracer  # noqa: E402


@pytest.fixture
def network_attempts(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    return block_external_network(monkeypatch)


@pytest.fixture
def store() -> InMemoryLightningStore:
    return InMemoryLightningStore()


@pytest.fixture
def tracer(store: InMemoryLightningStore, network_attempts: list[Any]) -> Iterator[WeaveTracer]:
    tracer = WeaveTracer(project_name="tests/weave")
    tracer.init_worker(0, store)
    yield tracer
    tracer.teardown_worker(0)
    clear_active_tracer()


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(always_return_token_ids=True) as server:
        yield server


def _by_name(spans: list[Span], name: str) -> list[Span]:
    return [span for span in spans if span.name == name]


async def test_weave_op_calling_openai_becomes_spans_with_sequence_ids(
    tracer: WeaveTracer, store: InMemoryLightningStore, server: OpenAITestServer, network_attempts: list[Any]
) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="test")

    @weave.op
    def lookup(city: str) -> dict[str, Any]:
        return {"city": city, "weather": "sunny"}

    @weave.op
    def agent(question: str) -> str:
        first = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": question}])
        facts = lookup("Oslo")
        stream = client.chat.completions.create(
            model="policy", messages=[{"role": "user", "content": f"{question} {facts['weather']}"}], stream=True
        )
        second = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        emit_reward(0.75)
        return f"{first.choices[0].message.content} / {second}"

    attempted = await store.start_rollout(input="weather")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        answer = agent("Weather in Oslo?")
    assert answer == "Echo: Weather in Oslo? / Echo: Weather in Oslo? sunny"

    spans = list(await store.query_spans(attempted.rollout_id))
    assert sorted(s.sequence_id for s in spans) == list(range(1, len(spans) + 1))
    assert all(s.rollout_id == attempted.rollout_id and s.attempt_id == attempted.attempt.attempt_id for s in spans)
    (agent_span,) = _by_name(spans, "agent")
    (lookup_span,) = _by_name(spans, "lookup")
    # In call order: the two calls run one after the other (sequence ids follow delivery, which may not).
    llm_spans = sorted(_by_name(spans, "openai.chat.completions.create"), key=lambda s: s.start_time or 0.0)
    (reward_span,) = _by_name(spans, "agentlightning.annotation")
    assert len(llm_spans) == 2
    assert agent_span.parent_id is None
    assert {s.parent_id for s in [lookup_span, reward_span, *llm_spans]} == {agent_span.span_id}
    assert len({s.trace_id for s in spans}) == 1
    assert agent_span.attributes["agentlightning.operation.input.question"] == "Weather in Oslo?"
    assert agent_span.attributes["agentlightning.operation.output"] == answer
    assert lookup_span.attributes["agentlightning.operation.output.weather"] == "sunny"
    assert SESSION_ATTRIBUTE not in agent_span.attributes
    for span, served in zip(llm_spans, server.responses, strict=True):
        assert span.attributes["agentlightning.operation.input.messages.0.role"] == "user"
        assert span.attributes["agentlightning.operation.output.id"] == served["id"]
        # Streamed or not, the token ids the server returned are on the span.
        assert span.attributes["prompt_token_ids"] == served["prompt_token_ids"]
        assert span.attributes["response_token_ids"] == served["choices"][0]["token_ids"]
    assert reward_span.attributes["agentlightning.reward.0.value"] == 0.75

    triplets, report = TracerTraceToTriplet().adapt_with_report(spans)
    assert [t.prompt["token_ids"] for t in triplets] == [r["prompt_token_ids"] for r in server.responses]
    assert [t.response["token_ids"] for t in triplets] == [r["choices"][0]["token_ids"] for r in server.responses]
    assert [t.reward for t in triplets] == [None, 0.75]
    assert report.dropped == [] and report.unmatched_rewards == []
    assert network_attempts == []


async def test_concurrent_trace_contexts_keep_their_calls_apart(
    tracer: WeaveTracer, store: InMemoryLightningStore
) -> None:
    @weave.op
    async def step(tag: str, index: int) -> str:
        await asyncio.sleep(0)
        return f"{tag}-{index}"

    @weave.op
    async def worker(tag: str) -> list[str]:
        return [await step(tag, i) for i in range(3)]

    async def run(tag: str) -> str:
        attempted = await store.start_rollout(input=tag)
        async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
            await worker(tag)
        return attempted.rollout_id

    rollout_a, rollout_b = await asyncio.gather(run("a"), run("b"))
    for rollout_id, tag in ((rollout_a, "a"), (rollout_b, "b")):
        spans = list(await store.query_spans(rollout_id))
        assert sorted(s.name for s in spans) == ["step", "step", "step", "worker"]
        assert {s.attributes["agentlightning.operation.input.tag"] for s in spans} == {tag}
        assert sorted(s.sequence_id for s in spans) == [1, 2, 3, 4]


async def test_failed_op_is_recorded_with_error_status(tracer: WeaveTracer, store: InMemoryLightningStore) -> None:
    @weave.op
    def explode() -> None:
        raise ValueError("no weather today")

    attempted = await store.start_rollout(input="x")
    async with tracer.trace_context(rollout_id=attempted.rollout_id, attempt_id=attempted.attempt.attempt_id):
        with pytest.raises(ValueError, match="no weather today"):
            explode()
    (span,) = await store.query_spans(attempted.rollout_id)
    assert span.name == "explode" and span.status.status_code == "ERROR"
    assert span.attributes["exception.type"] == "ValueError"
    assert "no weather today" in str(span.attributes["exception.message"])


async def test_emitters_outside_ops_and_local_traces(tracer: WeaveTracer) -> None:
    async with tracer.trace_context(name="local"):
        assert get_active_tracer() is tracer
        with tracer.operation_context("agentlightning.operation", {"step": 1}) as operation:
            operation.record_attributes({"agentlightning.operation.output": "done"})
        emit_reward(1.0)
    assert get_active_tracer() is None
    spans = tracer.get_last_trace()
    assert [s.name for s in spans] == ["agentlightning.operation", "agentlightning.annotation"]
    assert [s.sequence_id for s in spans] == [1, 2]
    assert all(s.rollout_id == "rollout-dummy" and s.parent_id is None for s in spans)
    assert spans[0].attributes["agentlightning.operation.output"] == "done"


async def test_trace_context_validates_ids(tracer: WeaveTracer) -> None:
    with pytest.raises(ValueError, match="must be given together"):
        async with tracer.trace_context(rollout_id="ro-1"):
            pass


def test_teardown_gives_weave_back_and_config_pickles(store: InMemoryLightningStore) -> None:
    from openai.resources.chat.completions import Completions

    from agentlightning.instrumentation.weave import get_weave_trace_server

    before = weave_client_context.get_weave_client()
    create_before = Completions.__dict__["create"]
    tracer = WeaveTracer(weave_user_settings={"capture_code": False})
    tracer.init_worker(0, store)
    assert get_weave_trace_server() is tracer.weave_trace_server is not None
    assert weave_client_context.get_weave_client() is not before
    clone = pickle.loads(pickle.dumps(tracer))
    assert clone.weave_user_settings == {"capture_code": False} and clone.weave_trace_server is None
    tracer.teardown_worker(0)
    assert get_weave_trace_server() is None
    assert weave_client_context.get_weave_client() is before
    assert Completions.__dict__["create"] is create_before
