"""GEPA through `Trainer.fit` with a scripted reflection model: the search's mechanics, not its results.

Checked: candidates run as rollouts through the store, the reflection model reads the rollouts' spans,
per-example Pareto fronts follow the stored rewards, budgets stop the search, the best candidate and the
front are published as resources, and a killed search resumes from the store.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.algorithm.apo import RetryPolicy
from agentlightning.algorithm.apo.llm import LLMCallError
from agentlightning.algorithm.gepa import GEPA
from agentlightning.algorithm.state import load_algorithm_state
from agentlightning.emitter import find_final_reward
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import AlgorithmState, PromptTemplate
from tests.support.openai_server import OpenAITestServer

from .scripted import (
    KEYWORDS,
    REFLECTION_MODEL,
    SEED_TEMPLATE,
    ScriptedReflection,
    initial_resources,
    keyword_agent,
    tasks,
)

TRAIN = tasks(KEYWORDS * 2, "t")
VAL = tasks(KEYWORDS, "v")


@pytest.fixture
def reflection() -> ScriptedReflection:
    return ScriptedReflection()


@pytest.fixture
def server(reflection: ScriptedReflection) -> Iterator[OpenAITestServer]:
    with OpenAITestServer(reflection) as running:
        yield running


def make_gepa(server: OpenAITestServer, **overrides: Any) -> GEPA:
    options: dict[str, Any] = {
        "reflection_model": REFLECTION_MODEL,
        "minibatch_size": 2,
        "seed": 3,
        "llm_retry": RetryPolicy(max_retries=1, base_delay=0.01, max_delay=0.02),
        **overrides,
    }
    return GEPA(AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0), **options)


def fit(gepa: GEPA, server: OpenAITestServer, store: InMemoryLightningStore) -> agl.Trainer:
    trainer = agl.Trainer(
        algorithm=gepa,
        store=store,
        strategy={"type": "shm", "main_thread": "algorithm", "n_runners": 2, "graceful_delay": 0.2},
        tracer=OtelTracer(),
        runner={"poll_interval": 0.05, "heartbeat_interval": 60.0},
        adapter=agl.TraceToMessages(),
        initial_resources=initial_resources(server.base_url),
    )
    trainer.fit(keyword_agent, TRAIN, val_dataset=VAL)
    return trainer


def stored_rewards(store: InMemoryLightningStore, run: str = "gepa") -> dict[tuple[str, str], list[float]]:
    """Final rewards of the run's rollouts, by (candidate resources id, example key)."""

    async def read() -> dict[tuple[str, str], list[float]]:
        found: dict[tuple[str, str], list[float]] = {}
        for rollout in await store.query_rollouts():
            meta = rollout.metadata or {}
            if meta.get("gepa_run") != run:
                continue
            reward = find_final_reward(list(await store.query_spans(rollout.rollout_id, "latest")))
            key = (str(meta["gepa_candidate"]), str(meta["gepa_example"]))
            found.setdefault(key, []).append(0.0 if reward is None else reward)
        return found

    return asyncio.run(read())


def test_the_pareto_front_per_example_follows_the_rewards_in_the_store(
    server: OpenAITestServer, reflection: ScriptedReflection
) -> None:
    store = InMemoryLightningStore()
    gepa = make_gepa(server, max_iterations=4)
    fit(gepa, server, store)
    result = gepa.result
    assert result is not None and gepa.stop_reason == "iterations: 4 of 4"
    assert len(result.candidates) >= 2, "the scripted proposals add a missing keyword: some must be accepted"

    # Every validation score of every candidate is the reward its rollout stored for that example.
    rewards = stored_rewards(store)
    candidate_ids = [gepa_resources_id(gepa, c) for c in result.candidates]
    for index, scores in enumerate(result.val_subscores):
        assert set(scores) == {0, 1, 2}
        for val_id, score in scores.items():
            assert score in rewards[(candidate_ids[index], f"val:{val_id}")]
    # The front of an example holds exactly the candidates with the highest score on it.
    for val_id, front in result.per_val_instance_best_candidates.items():
        best = max(scores[val_id] for scores in result.val_subscores)
        assert front == {i for i, scores in enumerate(result.val_subscores) if scores[val_id] == best}
    assert result.val_aggregate_scores[result.best_idx] == max(result.val_aggregate_scores)
    for index, scores in enumerate(result.val_subscores):
        assert result.val_aggregate_scores[index] == pytest.approx(statistics.fmean(scores.values()))

    # The reflection model was shown the stored trace: the agent's conversation and its notes.
    assert reflection.reflection_prompts
    assert all("[assistant] The answer is 42." in prompt for prompt in reflection.reflection_prompts)
    assert any("Note from the agent: the prompt must mention" in prompt for prompt in reflection.reflection_prompts)
    assert all("keep every placeholder" in prompt for prompt in reflection.reflection_prompts)

    # The front and the best candidate are published; the best is the latest resources and the result.
    async def published() -> tuple[Any, Any, Any]:
        return (
            await store.get_resources_by_id("gepa-frontier"),
            await store.get_resources_by_id("gepa-best"),
            await store.get_latest_resources(),
        )

    frontier, best, latest = asyncio.run(published())
    assert frontier is not None and best is not None and latest is not None
    on_front = set().union(*result.per_val_instance_best_candidates.values())
    assert set(frontier.resources) == {f"c{i}" for i in on_front}
    for name, template in frontier.resources.items():
        index = int(name[1:])
        extras = template.model_extra or {}
        assert template.template == result.candidates[index]["prompt"]
        assert extras["val_score"] == pytest.approx(result.val_aggregate_scores[index])
        assert extras["front_examples"] == sum(index in f for f in result.per_val_instance_best_candidates.values())
        assert extras["best"] == (index == result.best_idx)
    assert latest.resources_id == "gepa-best"
    assert best.resources["prompt"].template == result.candidates[result.best_idx]["prompt"]
    assert gepa.get_best_prompt() == best.resources["prompt"] and "llm" in best.resources
    assert gepa.get_result_resources() == best.resources


def gepa_resources_id(gepa: GEPA, candidate: dict[str, str]) -> str:
    import hashlib
    import json

    return f"{gepa.run_name}-{hashlib.sha256(json.dumps(sorted(candidate.items())).encode()).hexdigest()[:12]}"


@pytest.mark.parametrize(
    "budget, reason",
    [({"max_rollouts": 12}, "rollouts"), ({"max_reflection_tokens": 400}, "reflection tokens")],
)
def test_a_budget_stops_the_search_at_the_first_iteration_past_it(
    server: OpenAITestServer, budget: dict[str, int], reason: str
) -> None:
    store = InMemoryLightningStore()
    gepa = make_gepa(server, **budget)
    fit(gepa, server, store)
    assert gepa.stop_reason is not None and gepa.stop_reason.startswith(reason)
    saved = asyncio.run(load_algorithm_state(store, algorithm="gepa", run="gepa"))
    assert saved is not None
    if reason == "rollouts":
        assert gepa.result is not None and gepa.result.total_metric_calls is not None
        assert gepa.result.total_metric_calls >= 12
        # Every rollout it counted is one in the store (nothing reused: a fresh run).
        assert sum(len(v) for v in stored_rewards(store).values()) == gepa.result.total_metric_calls
        assert gepa.rollouts_started == gepa.result.total_metric_calls
    else:
        usage = gepa.reflection_usage
        assert usage.tokens >= 400 and usage.estimated_tokens == 0  # the server reported its usage
        assert usage.calls >= 1 and saved["reflection"]["input_tokens"] == usage.input_tokens


def test_a_dollar_budget_prices_the_reported_tokens(server: OpenAITestServer) -> None:
    gepa = make_gepa(
        server, max_reflection_dollars=0.01, price_per_million_input_tokens=20.0, price_per_million_output_tokens=80.0
    )
    fit(gepa, server, InMemoryLightningStore())
    usage = gepa.reflection_usage
    assert usage.dollars == pytest.approx((usage.input_tokens * 20.0 + usage.output_tokens * 80.0) / 1e6)
    assert usage.dollars >= 0.01 and gepa.stop_reason is not None and gepa.stop_reason.startswith("reflection dollars")
    with pytest.raises(ValueError, match="needs the reflection model's prices"):
        make_gepa(server, max_reflection_dollars=1.0)
    with pytest.raises(ValueError, match="GEPA needs a budget"):
        make_gepa(server)


def test_a_killed_search_resumes_from_the_store() -> None:
    store = InMemoryLightningStore()
    with OpenAITestServer(ScriptedReflection(fail_after=2)) as server:
        killed = make_gepa(server, max_iterations=5)
        with pytest.raises(LLMCallError, match="AuthenticationError"):
            fit(killed, server, store)
    saved = asyncio.run(load_algorithm_state(store, algorithm="gepa", run="gepa"))
    assert saved is not None and 2 <= saved["iteration"] < 5
    before = stored_rewards(store)
    candidates_before = saved["gepa"]["program_candidates"]

    with OpenAITestServer(ScriptedReflection()) as server:
        resumed = make_gepa(server, max_iterations=5)
        fit(resumed, server, store)
    result = resumed.result
    assert result is not None and resumed.stop_reason == "iterations: 5 of 5"
    # The candidates found before the crash are kept, in order; the reflection spending carried over.
    assert result.candidates[: len(candidates_before)] == candidates_before
    assert resumed.reflection_usage.calls > saved["reflection"]["calls"]
    # The seed was not validated again: its validation rollouts were reused from the store.
    seed_id = gepa_resources_id(resumed, {"prompt": SEED_TEMPLATE})
    after = stored_rewards(store)
    for val_id in range(len(VAL)):
        assert len(after[(seed_id, f"val:{val_id}")]) == len(before[(seed_id, f"val:{val_id}")])
    assert resumed.rollouts_started == sum(map(len, after.values())) - sum(map(len, before.values()))


def test_a_proposal_without_the_placeholder_is_scored_zero_without_rollouts() -> None:
    store = InMemoryLightningStore()
    with OpenAITestServer(ScriptedReflection(drop_placeholder=True)) as server:
        gepa = make_gepa(server, max_iterations=2)
        fit(gepa, server, store)
    assert gepa.result is not None and len(gepa.result.candidates) == 1  # nothing broken was accepted
    ids = {candidate for candidate, _example in stored_rewards(store)}
    assert ids == {gepa_resources_id(gepa, {"prompt": SEED_TEMPLATE})}  # only the seed ever ran
    assert gepa.get_best_prompt() == PromptTemplate(template=SEED_TEMPLATE, engine="f-string")


def test_the_search_state_lives_in_its_own_bundle_and_a_wrong_setup_is_refused(server: OpenAITestServer) -> None:
    store = InMemoryLightningStore()
    gepa = make_gepa(server, max_iterations=1, run_name="search-a")
    fit(gepa, server, store)
    update = asyncio.run(store.get_resources_by_id("search-a-state"))
    assert update is not None and isinstance(update.resources["state"], AlgorithmState)
    assert update.resources["state"].algorithm == "gepa" and update.resources["state"].run == "search-a"
    with pytest.raises(ValueError, match="not gepa run 'search-a'|hold the state of"):
        asyncio.run(load_algorithm_state(store, algorithm="apo", run="search-a"))
    with pytest.raises(ValueError, match="found none"):
        trainer = agl.Trainer(
            algorithm=make_gepa(server, max_iterations=1),
            strategy={"type": "shm", "main_thread": "algorithm", "graceful_delay": 0.2},
            tracer=OtelTracer(),
            initial_resources={"llm": initial_resources(server.base_url)["llm"]},
        )
        trainer.fit(keyword_agent, TRAIN, val_dataset=VAL)


def test_a_cancelled_search_ends_its_gepa_thread(server: OpenAITestServer) -> None:
    """Cancelled while it waits for rollouts no runner takes, GEPA's thread ends instead of waiting for ever."""
    gepa = make_gepa(server, max_iterations=1)
    gepa.set_store(InMemoryLightningStore())
    gepa.set_initial_resources(initial_resources(server.base_url))

    def gepa_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("AgentLightning-GEPA-")]

    async def cancel_soon() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(gepa.run(TRAIN, VAL), timeout=0.5)
        # The loop lives on (as the trainer's does) with the store call gepa's thread waits on still pending.
        deadline = time.monotonic() + 10.0
        while gepa_threads() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not gepa_threads()

    asyncio.run(cancel_soon())
