"""The same learner and policy server on CUDA: one real GRPO step and a served completion."""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentlightning.algorithm.grpo import GRPOConfig, GRPOLearner, Sample
from agentlightning.serving.engine import PolicyEngine
from agentlightning.serving.sampling import SamplingParams
from tests.support.tiny_model import tiny_model

pytestmark = [pytest.mark.train, pytest.mark.gpu]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
def test_one_grpo_step_on_cuda_with_sampling_time_logprobs() -> None:
    model, tokenizer = tiny_model()
    learner = GRPOLearner(model, tokenizer, GRPOConfig(device="cuda", learning_rate=1e-2, micro_batch_size=4))
    assert next(learner.policy.parameters()).is_cuda
    engine = PolicyEngine(learner.policy, tokenizer, seed=0)
    engine.start()
    try:
        params = SamplingParams(max_tokens=8, temperature=1.0, ignore_eos=True)
        ends = asyncio.run(engine.generate([1, 20, 21, 22], params, n=4))
    finally:
        engine.close()
    samples = [
        Sample([1, 20, 21, 22], end.token_ids, advantage=float(i % 2) - 0.5, old_logprobs=end.logprobs)
        for i, end in enumerate(ends)
    ]
    assert learner.score(samples)[0] == pytest.approx(samples[0].old_logprobs, abs=1e-3)
    before = [p.detach().clone() for p in learner.policy.parameters()]
    metrics = learner.step(samples)
    assert metrics["old_logprobs_recomputed"] == 0 and torch.isfinite(torch.tensor(metrics["loss"]))
    assert any(not torch.equal(b, p) for b, p in zip(before, learner.policy.parameters(), strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
@pytest.mark.parametrize("async_rollouts", [False, True])
def test_grpo_fit_on_cuda_serves_bf16_with_cuda_graphs(tmp_path, async_rollouts: bool) -> None:
    from agentlightning.algorithm.grpo import GRPO
    from agentlightning.store.memory import InMemoryLightningStore
    from tests.algorithm.grpo.test_algorithm import _config, _fit, patient_vowel_agent

    model, tokenizer = tiny_model()
    config = _config(tmp_path, device="auto", async_rollouts=async_rollouts, total_steps=3, micro_batch_size=4)
    algorithm = GRPO(config, model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore(), agent=patient_vowel_agent)  # retries ride out a swap's 429s
    assert algorithm.learner is not None and algorithm.server is not None
    served = algorithm.server.engine.model
    assert next(served.parameters()).dtype == torch.bfloat16 and next(served.parameters()).is_cuda
    assert next(algorithm.learner.policy.parameters()).dtype == torch.float32
    assert algorithm.server.engine.slot_model.graphs_captured > 0
    for record in algorithm.history:
        assert record["rollouts_failed"] == 0 and record["weight_sync_ms"] > 0
    print("weight_sync_ms per step:", [round(r["weight_sync_ms"], 2) for r in algorithm.history])
