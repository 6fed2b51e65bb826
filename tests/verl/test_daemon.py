"""AgentModeDaemon against a real store, real runner threads, the LLM proxy and the loopback OpenAI server.

The OpenAI test server returns token ids like vLLM does, so every check below compares the batch with the
ids the "model" really produced for each rollout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
import pytest
from openai import AsyncOpenAI

import agentlightning as agl
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import LLM
from agentlightning.verl.daemon import AgentModeDaemon
from tests.support.openai_server import OpenAITestServer

torch = pytest.importorskip("torch", reason="the verl batch tensors need torch (train extra)")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

MODEL = "tiny/policy"
PAD = 0


@agl.rollout
async def two_turn_agent(task: dict[str, Any], llm: LLM, rollout: agl.Rollout) -> Optional[float]:
    """Asks twice; behaviours: ok, fail (raises), no_reward, slow_first (first attempt stalls), hang."""
    behavior = task["behavior"]
    attempt = getattr(rollout, "attempt", None)
    if behavior == "slow_first" and attempt is not None and attempt.sequence_id == 1:
        await asyncio.sleep(4.0)
    if behavior == "hang":
        await asyncio.sleep(6.0)
    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    messages: list[dict[str, str]] = [{"role": "user", "content": task["question"]}]
    first = await client.chat.completions.create(model=llm.model, messages=messages)  # type: ignore[arg-type]
    messages += [{"role": "assistant", "content": first.choices[0].message.content or ""}]
    messages += [{"role": "user", "content": "and again"}]
    await client.chat.completions.create(model=llm.model, messages=messages)  # type: ignore[arg-type]
    if behavior == "fail":
        raise RuntimeError("the agent broke")
    if behavior == "no_reward":
        return None
    return float(task["target"])


class FlakyStore(InMemoryLightningStore):
    """Fails the first `failures` polls for finished rollouts, like a store server restarting."""

    def __init__(self, failures: int) -> None:
        super().__init__(thread_safe=True, scan_debounce_seconds=0.2)
        self.failures = failures

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Optional[float] = None) -> list[Any]:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("store server restarting")
        return await super().wait_for_rollouts(rollout_ids=rollout_ids, timeout=timeout)


def run_with_daemon(
    scenario: Callable[[AgentModeDaemon, OpenAITestServer], None],
    n_runners: int = 2,
    store: Optional[InMemoryLightningStore] = None,
    **daemon_kwargs: Any,
) -> None:
    """Run `scenario(daemon, backend)` as the algorithm of a Trainer whose runners serve the daemon's rollouts."""
    store = store or InMemoryLightningStore(thread_safe=True, scan_debounce_seconds=0.2)
    with OpenAITestServer(model=MODEL) as backend:

        @agl.algo
        def drive(*, store: agl.LightningStore) -> None:
            kwargs: dict[str, Any] = {
                "train_rollout_n": 2,
                "train_information": {"model": MODEL},
                "pad_token_id": PAD,
                "store": store,
                "poll_interval": 0.1,
                "trace_aggregation": "transition",  # one sample per call: these tests count samples per turn
                **daemon_kwargs,
            }
            daemon = AgentModeDaemon(**kwargs)
            daemon.start()
            try:
                scenario(daemon, backend)
            finally:
                daemon.stop()

        trainer = agl.Trainer(
            algorithm=drive,
            store=store,
            tracer=agl.OtelTracer(),
            runner={"poll_interval": 0.05, "heartbeat_interval": 0.5},
            strategy={"type": "shm", "n_runners": n_runners, "main_thread": "algorithm", "graceful_delay": 2.0},
        )
        trainer.fit(two_turn_agent)


def address(backend: OpenAITestServer) -> str:
    return backend.base_url.removeprefix("http://").removesuffix("/v1")


def data(behaviors: list[str], targets: list[float]) -> dict[str, Any]:
    return {
        "question": np.array([f"question number {i}" for i in range(len(behaviors))], dtype=object),
        "behavior": np.array(behaviors, dtype=object),
        "target": np.array(targets),
    }


def test_train_batch_matches_the_token_ids_the_model_produced() -> None:
    result: dict[str, Any] = {}

    def scenario(daemon: AgentModeDaemon, backend: OpenAITestServer) -> None:
        daemon.set_up_data_and_server(data(["ok", "ok"], [1.0, 0.25]), [address(backend)])
        daemon.run_until_all_finished()
        result["token_batch"], result["metrics"] = daemon.get_train_token_batch(64, 16)
        result["proto"], _ = daemon.get_train_data_batch(64, 16)
        result["rollouts"] = daemon.finished_rollouts
        result["responses"] = list(backend.responses)
        daemon.clear_data_and_server()

    run_with_daemon(scenario)
    batch = result["token_batch"]
    metrics = result["metrics"]
    assert metrics["training/n_rollouts"] == 4 and metrics["training/n_rollouts_failed"] == 0
    assert metrics["training/n_triplets"] == 8 and metrics["training/n_samples"] == 8
    assert metrics["training/reward"] == pytest.approx((1.0 + 1.0 + 0.25 + 0.25) / 4)
    t = batch.tensors
    assert t["prompts"].shape == (8, 64) and t["responses"].shape == (8, 16)
    assert t["input_ids"].shape == t["attention_mask"].shape == t["position_ids"].shape == (8, 80)
    assert t["token_level_scores"].shape == t["response_mask"].shape == (8, 16)
    assert torch.equal(t["input_ids"], torch.cat([t["prompts"], t["responses"]], dim=-1))

    recorded = {(tuple(r["prompt_token_ids"]), tuple(r["choices"][0]["token_ids"])) for r in result["responses"]}
    rewards = {r.rollout_id: r.reward for r in result["rollouts"]}
    data_ids = {r.rollout_id: r.data_id for r in result["rollouts"]}
    for row in range(8):
        prompt_len = int(t["attention_mask"][row, :64].sum())
        response_len = int(t["attention_mask"][row, 64:].sum())
        prompt = t["prompts"][row, 64 - prompt_len :].tolist()
        response = t["responses"][row, :response_len].tolist()
        assert (tuple(prompt), tuple(response)) in recorded
        assert t["prompts"][row, : 64 - prompt_len].eq(PAD).all() and t["responses"][row, response_len:].eq(PAD).all()
        assert t["attention_mask"][row].tolist() == [0] * (64 - prompt_len) + [1] * (prompt_len + response_len) + [
            0
        ] * (16 - response_len)
        assert t["response_mask"][row].tolist() == [1] * response_len + [0] * (16 - response_len)
        assert t["position_ids"][row, 64 - prompt_len :][: prompt_len + response_len].tolist() == list(
            range(prompt_len + response_len)
        )
        rollout_id = batch.non_tensors["rollout_id_list"][row]
        expected = torch.zeros(16)
        expected[response_len - 1] = rewards[rollout_id]
        assert torch.equal(t["token_level_scores"][row], expected)
        assert batch.non_tensors["data_id_list"][row] == data_ids[rollout_id]
    assert sorted(batch.non_tensors["turn_index_list"].tolist()) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len(set(batch.non_tensors["data_id_list"].tolist())) == 2, "rollout.n rollouts share a data id"
    assert not t["is_drop_mask"].any()
    proto = result["proto"]
    assert len(proto) == 8 and torch.equal(proto.batch["input_ids"], t["input_ids"])
    assert list(proto.non_tensor_batch["rollout_id_list"]) == list(batch.non_tensors["rollout_id_list"])


def test_failed_late_and_rewardless_rollouts_are_counted_once_and_never_crash() -> None:
    result: dict[str, Any] = {}

    def scenario(daemon: AgentModeDaemon, backend: OpenAITestServer) -> None:
        behaviors = ["ok", "fail", "no_reward", "slow_first"]
        daemon.set_up_data_and_server(data(behaviors, [1.0, 1.0, 1.0, 0.5]), [address(backend)])
        daemon.run_until_all_finished()
        result["first"] = daemon.get_train_token_batch(64, 16)
        # The stalled first attempt of "slow_first" was given up (timeout) and retried; its late report is refused.
        store = daemon.store
        slow = next(r.rollout_id for r in daemon.finished_rollouts if r.data_id == _data_id(daemon, 3))
        asyncio.run_coroutine_threadsafe(_wait_attempts_final(store, slow), daemon._loop).result(timeout=20)  # type: ignore[arg-type]
        result["attempts"] = asyncio.run_coroutine_threadsafe(
            store.query_attempts(slow),
            daemon._loop,  # type: ignore[arg-type]
        ).result(timeout=10)
        result["second"] = daemon.get_train_token_batch(64, 16)
        result["counts"] = daemon.status_counts()

    run_with_daemon(scenario, train_rollout_n=1, llm_timeout_seconds=1.5, max_attempts=2)
    batch, metrics = result["first"]
    assert result["counts"] == {"succeeded": 3, "failed": 1}
    assert metrics["training/n_rollouts"] == 3
    assert metrics["training/n_rollouts_failed"] == 1
    assert metrics["training/n_rollouts_reward_filled"] == 1
    assert metrics["training/n_samples"] == 6, "two turns for each of the three succeeded rollouts, none twice"
    assert metrics["training/reward"] == pytest.approx((1.0 + 0.0 + 0.5) / 3)
    # Attempt 1 was given up (timeout: final, its late report refused as stale) and retried; attempt 2 succeeded.
    attempts = result["attempts"].items
    assert [a.status for a in attempts] == ["timeout", "succeeded"] and attempts[1].end_time is not None
    second_batch, second_metrics = result["second"]
    assert second_metrics == metrics
    assert second_batch.non_tensors["rollout_id_list"].tolist() == batch.non_tensors["rollout_id_list"].tolist()


def _data_id(daemon: AgentModeDaemon, index: int) -> str:
    seen: list[str] = []
    for rollout in daemon.finished_rollouts:
        if rollout.data_id not in seen:
            seen.append(rollout.data_id)
    return seen[index]


async def _wait_attempts_final(store: agl.LightningStore, rollout_id: str) -> None:
    for _ in range(100):  # well inside the caller's 20 s
        attempts = (await store.query_attempts(rollout_id)).items
        if len(attempts) == 2 and attempts[0].status == "timeout" and attempts[1].end_time is not None:
            return
        await asyncio.sleep(0.1)


def test_batch_timeout_cancels_stragglers_and_reports_them() -> None:
    result: dict[str, Any] = {}

    def scenario(daemon: AgentModeDaemon, backend: OpenAITestServer) -> None:
        daemon.set_up_data_and_server(data(["ok", "hang"], [1.0, 1.0]), [address(backend)])
        daemon.run_until_all_finished()
        result["batch"], result["metrics"] = daemon.get_train_token_batch(64, 16)
        rollouts = {r.rollout_id: r.status for r in daemon.finished_rollouts}
        stored = asyncio.run_coroutine_threadsafe(
            daemon.store.query_rollouts(rollout_ids=list(rollouts)),
            daemon._loop,  # type: ignore[arg-type]
        ).result(timeout=10)
        result["stored"] = {r.rollout_id: r.status for r in stored.items}
        result["daemon"] = rollouts

    run_with_daemon(scenario, train_rollout_n=1, batch_timeout_seconds=2.5)
    metrics = result["metrics"]
    assert metrics["training/n_rollouts"] == 1 and metrics["training/n_rollouts_cancelled"] == 1
    assert sorted(result["daemon"].values()) == ["cancelled", "succeeded"]
    assert result["stored"] == result["daemon"], "the straggler is cancelled in the store too"


def test_store_errors_while_waiting_are_retried() -> None:
    result: dict[str, Any] = {}
    store = FlakyStore(failures=3)

    def scenario(daemon: AgentModeDaemon, backend: OpenAITestServer) -> None:
        daemon.set_up_data_and_server(data(["ok"], [1.0]), [address(backend)])
        daemon.run_until_all_finished()
        result["counts"] = daemon.status_counts()

    run_with_daemon(scenario, train_rollout_n=1, store=store)
    assert result["counts"] == {"succeeded": 1} and store.failures == 0


def test_trajectory_mode_makes_one_masked_sample_per_rollout() -> None:
    result: dict[str, Any] = {}

    def scenario(daemon: AgentModeDaemon, backend: OpenAITestServer) -> None:
        daemon.set_up_data_and_server(data(["ok"], [1.0]), [address(backend)])
        daemon.run_until_all_finished()
        result["batch"], result["metrics"] = daemon.get_train_token_batch(64, 48)
        result["responses"] = list(backend.responses)

    run_with_daemon(scenario, train_rollout_n=1, trace_aggregation="trajectory")
    batch = result["batch"]
    (first, second) = result["responses"]
    p1, r1 = first["prompt_token_ids"], first["choices"][0]["token_ids"]
    p2, r2 = second["prompt_token_ids"], second["choices"][0]["token_ids"]
    assert p2[: len(p1) + len(r1)] == p1 + r1
    between = p2[len(p1) + len(r1) :]
    response = r1 + between + r2
    t = batch.tensors
    assert len(batch) == 1
    assert t["prompts"][0, 64 - len(p1) :].tolist() == p1
    assert t["responses"][0, : len(response)].tolist() == response
    assert t["response_mask"][0].tolist() == [1] * len(r1) + [0] * len(between) + [1] * len(r2) + [0] * (
        48 - len(response)
    )
    assert t["token_level_scores"][0, len(response) - 1] == 1.0 and t["token_level_scores"][0].sum() == 1.0


def test_validation_metrics_use_one_rollout_per_sample() -> None:
    result: dict[str, Any] = {}

    def scenario(daemon: AgentModeDaemon, backend: OpenAITestServer) -> None:
        daemon.set_up_data_and_server(data(["ok", "ok", "fail"], [1.0, 0.0, 1.0]), [address(backend)], is_train=False)
        daemon.run_until_all_finished()
        result["metrics"] = daemon.get_test_metrics()
        result["n_requests"] = len(backend.responses)
        with pytest.raises(RuntimeError, match="training set-up|validation set-up"):
            daemon.get_train_token_batch(64, 16)

    run_with_daemon(scenario)
    metrics = result["metrics"]
    assert result["n_requests"] == 6, "three samples, one rollout each, two calls per rollout"
    assert metrics["val/n_rollouts"] == 2 and metrics["val/n_rollouts_failed"] == 1
    assert metrics["val/reward"] == pytest.approx(0.5)
    assert metrics["val/turn_count"] == 2.0
    assert metrics["val/mean_response_length"] > 0


def test_constructor_rejects_bad_settings() -> None:
    store = InMemoryLightningStore()
    with pytest.raises(ValueError, match="store"):
        AgentModeDaemon(train_rollout_n=1)
    with pytest.raises(ValueError, match="train_rollout_n"):
        AgentModeDaemon(train_rollout_n=0, store=store)
    with pytest.raises(ValueError, match="v0"):
        AgentModeDaemon(store=store, mode="v0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="trace_aggregator.level"):
        AgentModeDaemon(store=store, trace_aggregation="episode")
    with pytest.raises(ValueError, match="batch_timeout_seconds"):
        AgentModeDaemon(store=store, batch_timeout_seconds=0)
