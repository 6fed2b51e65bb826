"""Scoring a prompt on a batch through a real in-memory store, with a hand-driven worker standing in for runners."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

import pytest

from agentlightning.adapter import TraceToMessages
from agentlightning.algorithm.apo.evaluation import UNFINISHED, evaluate_prompt_on_batch
from agentlightning.emitter.reward import emit_reward
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import PromptTemplate, Span

RESOURCES: Any = {"prompt": PromptTemplate(template="Answer {q}", engine="f-string")}


async def work(store: InMemoryLightningStore, count: int, seen: Optional[list[Any]] = None) -> None:
    """Claim `count` rollouts; each records one LLM call and a reward equal to its task's `reward` (if any)."""
    done = 0
    while done < count:
        rollout = await store.dequeue_rollout(worker_id="w")
        if rollout is None:
            await asyncio.sleep(0.01)
            continue
        if seen is not None:
            seen.append((rollout.input, rollout.mode, rollout.resources_id))
        rollout_id, attempt_id = rollout.rollout_id, rollout.attempt.attempt_id
        llm_span = Span.from_attributes(
            attributes={
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": f"question {rollout.input['q']}",
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": "answer",
            },
            name="openai.chat.completion",
            sequence_id=await store.get_next_span_sequence_id(rollout_id, attempt_id),
            rollout_id=rollout_id,
            attempt_id=attempt_id,
        )
        await store.add_span(llm_span)
        if rollout.input.get("reward") is not None:
            core = emit_reward(rollout.input["reward"], propagate=False)
            sequence_id = await store.get_next_span_sequence_id(rollout_id, attempt_id)
            span = Span.from_core_fields(core, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id)
            await store.add_span(span)
        status = "failed" if rollout.input.get("fail") else "succeeded"
        await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status=status)
        done += 1


async def test_scores_rewards_and_collects_messages() -> None:
    store = InMemoryLightningStore()
    tasks = [{"q": 1, "reward": 1.0}, {"q": 2, "reward": 0.5}, {"q": 3}, {"q": 4, "reward": 0.5, "fail": True}]
    seen: list[Any] = []
    worker = asyncio.create_task(work(store, len(tasks), seen))
    evaluation = await evaluate_prompt_on_batch(
        store, TraceToMessages(), resources_id="v3", resources=RESOURCES, tasks=tasks, mode="train", timeout=30
    )
    await worker
    assert evaluation.score == pytest.approx((1.0 + 0.5 + 0.0 + 0.5) / 4)
    assert [r.reward for r in evaluation.results] == [1.0, 0.5, None, 0.5]
    assert [r.status for r in evaluation.results] == ["succeeded", "succeeded", "succeeded", "failed"]
    assert [r.task for r in evaluation.results] == tasks and evaluation.unfinished == 0
    assert evaluation.results[0].messages[0]["messages"] == [
        {"role": "user", "content": "question 1"},
        {"role": "assistant", "content": "answer"},
    ]
    # Rollouts ran with the published resources, in train mode.
    assert {(mode, rid) for _, mode, rid in seen} == {("train", "v3")}
    update = await store.get_resources_by_id("v3")
    assert update is not None and update.resources["prompt"] == RESOURCES["prompt"]


async def test_a_timeout_returns_partial_results_and_cancels_stragglers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentlightning.algorithm.apo")
    store = InMemoryLightningStore()
    tasks = [{"q": 1, "reward": 1.0}, {"q": 2, "reward": 1.0}, {"q": 3, "reward": 1.0}]
    worker = asyncio.create_task(work(store, 1))  # only the first task gets done
    evaluation = await evaluate_prompt_on_batch(
        store, TraceToMessages(), resources_id="v1", resources=RESOURCES, tasks=tasks, mode="val", timeout=0.5
    )
    await worker
    assert evaluation.unfinished == 2
    assert [r.status for r in evaluation.results] == ["succeeded", UNFINISHED, UNFINISHED]
    assert evaluation.score == pytest.approx(1 / 3)
    assert "2 of 3 val rollouts for resources 'v1' did not finish within 0.5 s" in caplog.text
    # Nobody waits for the stragglers any more, so runners must not pick them up.
    assert await store.dequeue_rollout() is None
    statuses = [r.status for r in await store.query_rollouts(rollout_id_in=[r.rollout_id for r in evaluation.results])]
    assert statuses.count("cancelled") == 2


async def test_malformed_traces_cost_messages_not_the_score(caplog: pytest.LogCaptureFixture) -> None:
    def broken_adapter(spans: Any) -> Any:
        raise ValueError("gen_ai.prompt.* must be indexed")

    store = InMemoryLightningStore()
    worker = asyncio.create_task(work(store, 1))
    evaluation = await evaluate_prompt_on_batch(
        store,
        broken_adapter,
        resources_id="v0",
        resources=RESOURCES,
        tasks=[{"q": 1, "reward": 0.25}],
        mode="val",
        timeout=30,
    )
    await worker
    assert evaluation.score == 0.25 and evaluation.results[0].messages == []
    assert "Could not turn the spans of rollout" in caplog.text
