"""Critique/edit calls against the loopback server: retries with backoff, fatal errors, no tracing of APO's calls."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI

from agentlightning.algorithm.apo.llm import LLMCallError, RetryPolicy, chat_text
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from tests.support.openai_server import ErrorReply, OpenAITestServer, ReplyLike

MESSAGES = [{"role": "user", "content": "critique this"}]


class Flaky:
    """Fails the first `failures` requests with `status`, then answers "fine"."""

    def __init__(self, failures: int, status: int = 500) -> None:
        self.failures = failures
        self.status = status
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> ReplyLike:
        self.bodies.append(request)
        if len(self.bodies) <= self.failures:
            return ErrorReply(status_code=self.status, message=f"scripted {self.status}")
        return "fine"


@pytest.fixture
def flaky() -> Flaky:
    return Flaky(failures=0)


@pytest.fixture
def client(flaky: Flaky) -> Iterator[AsyncOpenAI]:
    with OpenAITestServer(flaky) as server:
        yield AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)


class SleepRecorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


NO_JITTER = RetryPolicy(max_retries=3, base_delay=0.5, max_delay=1.5, jitter=0.0)


@pytest.mark.parametrize("status", [500, 502, 429, 408])
async def test_transient_errors_are_retried_with_exponential_backoff(
    flaky: Flaky, client: AsyncOpenAI, status: int
) -> None:
    flaky.failures, flaky.status = 3, status
    sleep = SleepRecorder()
    text = await chat_text(client, model="m", messages=MESSAGES, retry=NO_JITTER, sleep=sleep)
    assert text == "fine"
    assert len(flaky.bodies) == 4
    assert sleep.delays == [0.5, 1.0, 1.5]  # doubling, capped at max_delay


async def test_retries_run_out(flaky: Flaky, client: AsyncOpenAI) -> None:
    flaky.failures = 100
    sleep = SleepRecorder()
    with pytest.raises(LLMCallError, match=r"critique with model 'm' failed \(gave up after 4 attempts\)") as info:
        await chat_text(client, model="m", messages=MESSAGES, retry=NO_JITTER, sleep=sleep, purpose="critique")
    assert not info.value.fatal
    assert len(flaky.bodies) == 4 and len(sleep.delays) == 3


@pytest.mark.parametrize(("status", "fatal"), [(401, True), (403, True), (404, True), (400, False), (422, False)])
async def test_client_errors_are_not_retried(flaky: Flaky, client: AsyncOpenAI, status: int, fatal: bool) -> None:
    flaky.failures, flaky.status = 1, status
    sleep = SleepRecorder()
    with pytest.raises(LLMCallError, match="not retryable") as info:
        await chat_text(client, model="m", messages=MESSAGES, retry=NO_JITTER, sleep=sleep)
    assert info.value.fatal is fatal
    assert len(flaky.bodies) == 1 and sleep.delays == []


async def test_connection_errors_are_retried() -> None:
    unreachable = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0)
    sleep = SleepRecorder()
    with pytest.raises(LLMCallError, match="APIConnectionError"):
        await chat_text(unreachable, model="m", messages=MESSAGES, retry=RetryPolicy(max_retries=2), sleep=sleep)
    assert len(sleep.delays) == 2


async def test_only_plain_chat_parameters_are_sent(flaky: Flaky, client: AsyncOpenAI) -> None:
    await chat_text(client, model="m", messages=MESSAGES, temperature=0.7)
    await chat_text(client, model="m", messages=MESSAGES)
    assert set(flaky.bodies[0]) == {"model", "messages", "temperature"} and flaky.bodies[0]["temperature"] == 0.7
    assert set(flaky.bodies[1]) == {"model", "messages"}


async def test_apo_calls_are_not_recorded_inside_an_agent_trace(client: AsyncOpenAI) -> None:
    store = InMemoryLightningStore()
    rollout = await store.start_rollout(input="task")
    tracer = OtelTracer()
    tracer.init_worker(0, store)
    try:
        async with tracer.trace_context(rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id):
            await chat_text(client, model="m", messages=MESSAGES)
            # The agent's own call in the same context is recorded.
            await client.chat.completions.create(model="agent", messages=MESSAGES)  # type: ignore[arg-type]
        spans = await store.query_spans(rollout.rollout_id)
    finally:
        tracer.teardown_worker(0)
    models = [s.attributes.get("gen_ai.request.model") for s in spans if s.name == "openai.chat.completion"]
    assert models == ["agent"]


def test_retry_policy_validates_and_jitters() -> None:
    with pytest.raises(ValueError, match="max_retries must be >= 0"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError, match="jitter must lie in"):
        RetryPolicy(jitter=2.0)
    policy = RetryPolicy(base_delay=1.0, max_delay=100.0, jitter=0.5)
    delays = [policy.delay(3, random.Random(seed)) for seed in range(20)]
    assert all(2.0 <= d <= 4.0 for d in delays) and len(set(delays)) > 1
