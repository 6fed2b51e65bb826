"""A timed-out model call or reward fails its attempt as a timeout, with where it happened on the
exception span (`agentlightning.timeout.location`): algorithms discard it instead of training on reward 0."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx2  # the HTTP client openai is built on
import openai
import pytest

import agentlightning as agl
from agentlightning.emitter import RewardTimeoutError, reward_within
from agentlightning.litagent.process import ProcessAgentError
from agentlightning.runner.failures import timeout_location
from agentlightning.semconv import AGL_TIMEOUT_LOCATION
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import NamedResources, Rollout


def _openai_timeout() -> openai.APITimeoutError:
    return openai.APITimeoutError(request=httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions"))


def test_each_kind_of_timeout_names_where_it_happened() -> None:
    assert timeout_location(_openai_timeout()) == "llm_call"
    assert timeout_location(httpx2.ReadTimeout("slow")) == "llm_call"
    assert timeout_location(RewardTimeoutError("slow judge")) == "reward"
    process = ProcessAgentError("killed", exit_code=-9, reason="timeout", stderr_tail="")
    assert timeout_location(process) == "rollout"
    assert timeout_location(ProcessAgentError("exit 1", exit_code=1, reason="exit", stderr_tail="")) is None
    assert timeout_location(asyncio.TimeoutError()) == "agent"
    assert timeout_location(ValueError("no timeout here")) is None
    try:  # a wrapped timeout is found through its cause
        raise RuntimeError("tool failed") from _openai_timeout()
    except RuntimeError as wrapped:
        assert timeout_location(wrapped) == "llm_call"


async def test_reward_within_returns_the_reward_or_raises_a_reward_timeout() -> None:
    async def judge(answer: str) -> float:
        return float(answer == "4")

    assert await reward_within(5.0, judge, "4") == 1.0
    assert await reward_within(5.0, lambda answer: len(answer) / 10, "four") == pytest.approx(0.4)  # type: ignore[arg-type]
    with pytest.raises(RewardTimeoutError, match="longer than 0.05 s") as info:
        await reward_within(0.05, asyncio.sleep(5.0))
    assert info.value.timeout_location == "reward"
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        await reward_within(0.0, judge, "4")


class TimingOutAgent(agl.LitAgent[str]):
    """Times out where the task says: in its model call, or in its reward."""

    async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        if task == "llm_call":
            raise _openai_timeout()
        return await reward_within(0.05, asyncio.to_thread(time.sleep, 0.5))


@pytest.mark.parametrize("where", ["llm_call", "reward"])
async def test_a_timed_out_attempt_records_the_location_on_its_exception_span_and_no_reward(where: str) -> None:
    store = InMemoryLightningStore()
    runner: Any = agl.LitAgentRunner(tracer=OtelTracer(), poll_interval=0.05, heartbeat_interval=0)
    with runner.run_context(agent=TimingOutAgent(), store=store):
        with pytest.raises((openai.APITimeoutError, RewardTimeoutError)):
            await runner.step(where)
    (rollout,) = await store.query_rollouts()
    assert rollout.status == "failed"
    spans = list(await store.query_spans(rollout.rollout_id))
    (span,) = [s for s in spans if s.name == "agentlightning.exception"]
    assert span.attributes[AGL_TIMEOUT_LOCATION] == where
    assert agl.find_final_reward(spans) is None, "a timeout is never recorded as a reward"


class PlainlyFailingAgent(agl.LitAgent[str]):
    async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        raise ValueError("not a timeout")


async def test_an_ordinary_failure_carries_no_timeout_location() -> None:
    store = InMemoryLightningStore()
    runner: Any = agl.LitAgentRunner(tracer=OtelTracer(), poll_interval=0.05, heartbeat_interval=0)
    with runner.run_context(agent=PlainlyFailingAgent(), store=store):
        with pytest.raises(ValueError):
            await runner.step("x")
    (rollout,) = await store.query_rollouts()
    (span,) = [s for s in await store.query_spans(rollout.rollout_id) if s.name == "agentlightning.exception"]
    assert AGL_TIMEOUT_LOCATION not in span.attributes
