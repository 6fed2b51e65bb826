"""GRPO runs on a tiny model whose metrics file accounts for every generated token, on every step:
generated == trained + discarded (by reason) + (in_flight_end - in_flight_start)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Dict, List

import pytest

import agentlightning as agl
from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.algorithm.grpo import GRPO, GRPOConfig, read_metrics
from agentlightning.algorithm.grpo.token_report import token_report_resources_id
from agentlightning.algorithm.grpo.tokens import DISCARD_REASONS, response_tokens
from agentlightning.emitter import reward_within
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import LLM, AlgorithmState
from tests.support.tiny_model import tiny_model

from .test_algorithm import TASKS, ask, vowel_fraction

pytestmark = [pytest.mark.train, pytest.mark.slow]


def _closes(record: Dict[str, Any]) -> bool:
    discarded = sum(record[f"tokens/discarded/{reason}"] for reason in DISCARD_REASONS)
    change = record["tokens/in_flight"] - record["tokens/in_flight_start"]
    return record["tokens/generated"] == record["tokens/trained"] + discarded + change


def _fit(algorithm: GRPO, store: InMemoryLightningStore, agent: Any, val: bool = False) -> None:
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=store,
        runner={"poll_interval": 0.05},
        strategy={"type": "shm", "n_runners": 2, "main_thread": "algorithm"},
    )
    trainer.fit(agent, train_dataset=TASKS, val_dataset=TASKS[:2] if val else None)


def _config(tmp_path: Path, **overrides: Any) -> GRPOConfig:
    values: Dict[str, Any] = {
        "group_size": 4,
        "batch_size": 2,
        "total_steps": 2,
        "max_new_tokens": 6,
        "learning_rate": 3e-2,
        "device": "cpu",
        "metrics_path": str(tmp_path / "metrics.jsonl"),
        "strict_token_accounting": True,
        **overrides,
    }
    return GRPOConfig(**values)


async def _tokens_in_store(store: InMemoryLightningStore) -> int:
    """Every response token the store's rollouts recorded, each attempt adapted on its own."""
    adapter = TracerTraceToTriplet()
    total = 0
    for rollout in await store.query_rollouts():
        by_attempt: Dict[str, List[Any]] = {}
        for span in await store.query_spans(rollout.rollout_id):
            by_attempt.setdefault(span.attempt_id, []).append(span)
        total += sum(response_tokens(adapter.adapt(spans)) for spans in by_attempt.values())
    return total


@agl.rollout
async def half_tied_agent(task: Dict[str, Any], llm: LLM) -> float:
    """Rewards vowels on question 0 and nothing else: the other tasks' groups all tie."""
    text = await ask(task, llm)
    return vowel_fraction(text) if task["question"] == "question 0" else 0.1


def test_every_step_of_a_run_closes_and_counts_all_the_tokens_in_the_store(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    config = _config(tmp_path, batch_size=4, max_response_length=3, drop_tied_groups=True)
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    store = InMemoryLightningStore()
    _fit(algorithm, store, half_tied_agent, val=True)

    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all(_closes(r) and r["tokens/unaccounted"] == 0 for r in records), records
    # Step 0 is the validation before training: its tokens are only ever evaluated.
    assert records[0]["tokens/generated"] == records[0]["tokens/discarded/eval"] > 0
    assert records[0]["tokens/trained"] == 0
    for record in records[1:]:
        # max_response_length=3 < max_new_tokens=6 cuts responses; 3 of the 4 groups tie and are dropped.
        assert record["tokens/trained"] > 0 and record["tokens/discarded/truncated"] > 0
        assert record["tokens/discarded/tied"] > 0
        assert record["tokens/in_flight"] == 0, "a synchronous step leaves nothing in flight"
    # What the steps say was generated is what the rollouts recorded in the store, to the token.
    generated = sum(r["tokens/generated"] for r in records)
    assert generated == asyncio.run(_tokens_in_store(store))
    # The dashboard's copy in the store holds the same per-step counts.
    update = asyncio.run(store.get_resources_by_id(token_report_resources_id("GRPO")))
    assert update is not None
    report = update.resources["state"]
    assert isinstance(report, AlgorithmState)
    assert [s["tokens/generated"] for s in report.state["steps"]] == [r["tokens/generated"] for r in records]
    latest = asyncio.run(store.get_latest_resources())
    assert latest is not None and latest.resources_id == GRPO.TRAIN_RESOURCES_ID, "agents still find the policy"


async def _slow_judge() -> float:
    await asyncio.sleep(5.0)
    return 1.0


@agl.rollout
async def chaotic_agent(task: Dict[str, Any], llm: LLM) -> float:
    """question 0 trains; 1: the agent crashes after its call; 2: its reward times out; 3: a mixed group."""
    text = await ask(task, llm, max_retries=8)
    if task["question"] == "question 1":
        raise RuntimeError("the agent crashed after its model call")
    if task["question"] == "question 2":
        return await reward_within(0.05, _slow_judge())
    if task["question"] == "question 3" and len(text) % 2:
        return await reward_within(0.05, _slow_judge())
    return vowel_fraction(text)


def test_failed_and_timed_out_rollouts_and_weight_swaps_still_close(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    config = _config(tmp_path, batch_size=4, total_steps=3, async_rollouts=True, max_staleness=1)
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore(), chaotic_agent)

    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(_closes(r) and r["tokens/unaccounted"] == 0 for r in records), records
    for previous, record in zip(
        records, records[1:], strict=False
    ):  # what one step left in flight, the next starts with
        assert record["tokens/in_flight_start"] == previous["tokens/in_flight"]
    assert all(r["weights_version"] == r["step"] for r in records), "the weights were swapped after every step"
    totals = {key: sum(r[key] for r in records) for key in records[0] if key.startswith("tokens/")}
    assert totals["tokens/trained"] > 0
    assert totals["tokens/discarded/failed"] > 0, "the crashed rollouts' tokens are discarded as failed"
    assert totals["tokens/discarded/timeout"] > 0, "the timed-out rewards' tokens are discarded as timeout"
    assert sum(r["rollouts_timed_out"] for r in records) > 0
    # A failed or timed-out rollout is no reward of 0 in its group: it makes no row (one call, one row each).
    assert all(r["rows"] == r["rollouts"] - r["rollouts_failed"] for r in records)
