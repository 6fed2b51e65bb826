"""GRPO runs on a tiny model whose metrics file accounts for every generated token, on every step:
generated == trained + discarded (by reason) + (in_flight_end - in_flight_start)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

import agentlightning as agl
from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.algorithm.grpo import GRPO, GRPOConfig, read_metrics
from agentlightning.algorithm.grpo.token_report import token_report_resources_id
from agentlightning.algorithm.grpo.tokens import DISCARD_REASONS, response_tokens
from agentlightning.emitter import reward_within
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.store_http.client import LightningStoreClient
from agentlightning.types import LLM, AlgorithmState, AttemptedRollout, Rollout
from agentlightning.utils.server_launcher import pick_free_port
from tests.support.tiny_model import tiny_model

from .test_algorithm import TASKS, _fit, ask, half_tied_agent, vowel_fraction

pytestmark = [pytest.mark.train, pytest.mark.slow]


def _closes(record: Dict[str, Any]) -> bool:
    discarded = sum(record[f"tokens/discarded/{reason}"] for reason in DISCARD_REASONS)
    change = record["tokens/in_flight"] - record["tokens/in_flight_start"]
    return record["tokens/generated"] == record["tokens/trained"] + discarded + change


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


def test_every_step_of_a_run_closes_and_counts_all_the_tokens_in_the_store(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    config = _config(tmp_path, batch_size=4, max_response_length=3, drop_tied_groups=True)
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    store = InMemoryLightningStore()
    _fit(algorithm, store, val=True, agent=half_tied_agent)

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


async def _chaos(task: Dict[str, Any], text: str) -> float:
    """question 0 trains; 1: the agent crashes after its call; 2: its reward times out; 3: a mixed group."""
    if task["question"] == "question 1":
        raise RuntimeError("the agent crashed after its model call")
    if task["question"] == "question 2":
        return await reward_within(0.05, _slow_judge())
    if task["question"] == "question 3" and len(text) % 2:
        return await reward_within(0.05, _slow_judge())
    return vowel_fraction(text)


@agl.rollout
async def chaotic_agent(task: Dict[str, Any], llm: LLM) -> float:
    return await _chaos(task, await ask(task, llm, max_retries=8))


def test_failed_and_timed_out_rollouts_and_weight_swaps_still_close(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    config = _config(tmp_path, batch_size=4, total_steps=3, async_rollouts=True, max_staleness=1)
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore(), agent=chaotic_agent)

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


KILL_MARKER_ENV = "AGL_TEST_KILL_MARKER"
"""The file whose creation claims the one kill of a run (the runner processes inherit the variable)."""


def _claim_the_kill() -> bool:
    marker = os.environ.get(KILL_MARKER_ENV)
    if not marker:
        return False
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


STORE_URL_ENV = "AGL_TEST_STORE_URL"
"""The run's store server, where the killing agent waits for its model call's span before the kill."""


async def _wait_for_a_span(rollout: AttemptedRollout) -> None:
    """Until the attempt's spans (sent in batches) are in the store: bounded, 60 s at most."""
    client = LightningStoreClient(os.environ[STORE_URL_ENV])
    try:
        for _ in range(1200):
            if (await client.query_spans(rollout.rollout_id, rollout.attempt.attempt_id)).items:
                return
            await asyncio.sleep(0.05)
    finally:
        await client.close()


@agl.rollout
async def runner_killing_agent(task: Dict[str, Any], llm: LLM, rollout: AttemptedRollout) -> float:
    """The chaotic agent, whose first rollout of question 0 SIGKILLs its runner process (as the OOM killer
    would) once its model call is recorded in the store."""
    text = await ask(task, llm, max_retries=8)
    if task["question"] == "question 0" and _claim_the_kill():
        await _wait_for_a_span(rollout)
        os.kill(os.getpid(), signal.SIGKILL)
    return await _chaos(task, text)


async def _killed_rollout(store: InMemoryLightningStore) -> Tuple[Rollout, List[str], int]:
    """The rollout whose runner was killed (the only question 0 attempt that did not succeed), its attempts'
    statuses and the response tokens its dead attempt recorded."""
    adapter = TracerTraceToTriplet()
    for rollout in await store.query_rollouts():
        attempts = list(await store.query_attempts(rollout.rollout_id))
        if rollout.input == TASKS[0] and any(a.status != "succeeded" for a in attempts):
            dead = [s for s in await store.query_spans(rollout.rollout_id) if s.attempt_id == attempts[0].attempt_id]
            return rollout, [a.status for a in attempts], response_tokens(adapter.adapt(dead))
    raise AssertionError("no rollout of question 0 lost its attempt; was the runner killed?")


def test_a_runner_killed_mid_rollout_with_timeouts_and_weight_swaps_still_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Client-server, 2 runner processes, one SIGKILLed holding a rollout whose model call is in the store.
    The store's watchdog gives up on that attempt at the rollout timeout (10 s, counted from its start): until
    then its tokens are in flight (its group is usually carried over to the next step), then discarded as timeout."""
    monkeypatch.setenv(KILL_MARKER_ENV, str(tmp_path / "killed"))
    port = pick_free_port()
    monkeypatch.setenv(STORE_URL_ENV, f"http://127.0.0.1:{port}")
    model, tokenizer = tiny_model()
    config = _config(
        tmp_path, batch_size=4, total_steps=3, async_rollouts=True, max_staleness=1, rollout_timeout_s=10.0
    )
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    store = InMemoryLightningStore()
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=store,
        n_runners=2,
        runner={"poll_interval": 0.05, "heartbeat_interval": 0.2},
        strategy={"type": "cs", "server_host": "127.0.0.1", "server_port": port, "graceful_timeout": 2.0},
    )
    # One runner of two was killed by a signal: fit returns once the algorithm finished with the other.
    trainer.fit(runner_killing_agent, train_dataset=TASKS)
    assert (tmp_path / "killed").exists()

    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(_closes(r) and r["tokens/unaccounted"] == 0 for r in records), records
    for previous, record in zip(records, records[1:], strict=False):
        assert record["tokens/in_flight_start"] == previous["tokens/in_flight"]
    assert all(r["weights_version"] == r["step"] for r in records)
    killed, statuses, dead_tokens = asyncio.run(_killed_rollout(store))
    assert dead_tokens > 0, "the dead attempt's model call was recorded before the kill"
    assert killed.status == "failed" and statuses == ["timeout"], (killed, statuses)
    totals = {key: sum(r[key] for r in records) for key in records[0] if key.startswith("tokens/")}
    # Only the killed rollout of question 0 lands anywhere but trained (or cut): with the other timeouts.
    assert totals["tokens/discarded/timeout"] >= dead_tokens
    assert totals["tokens/discarded/failed"] > 0 and totals["tokens/trained"] > 0
