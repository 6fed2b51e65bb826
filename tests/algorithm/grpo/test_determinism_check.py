"""The self-check of deterministic mode: a fixed prompt replayed alone and in a batch, compared bit for bit."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaForCausalLM

import agentlightning as agl
from agentlightning.algorithm.grpo import GRPO, GRPOConfig
from agentlightning.algorithm.grpo.determinism import deterministic_torch
from agentlightning.algorithm.grpo.determinism_check import DeterminismError, check_determinism
from agentlightning.serving.server import PolicyServer
from agentlightning.store.memory import InMemoryLightningStore
from tests.algorithm.grpo.test_algorithm import TASKS, vowel_agent
from tests.support.tiny_model import tiny_model

pytestmark = [pytest.mark.train, pytest.mark.slow]


class BatchSensitiveLlama(LlamaForCausalLM):
    """Logits that shift with the number of rows in the call, as a GPU matmul whose kernel depends on it."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = super().forward(*args, **kwargs)
        logits: Any = out.logits
        ramp = torch.linspace(0.0, 1.0, logits.shape[-1], dtype=logits.dtype, device=logits.device)
        out.logits = logits + 1e-3 * (logits.shape[0] - 1) * ramp
        return out


def batch_sensitive_model() -> tuple[Any, Any]:
    model, tokenizer = tiny_model(seed=0)
    sensitive = BatchSensitiveLlama(model.config)
    sensitive.load_state_dict(model.state_dict())
    return sensitive.eval(), tokenizer


def _check(deterministic: bool) -> Any:
    model, tokenizer = batch_sensitive_model()
    with deterministic_torch(True), PolicyServer(model, tokenizer, seed=0, deterministic=deterministic) as server:

        async def run() -> Any:
            return await check_determinism(server.engine, tokenizer, batch_size=4, max_tokens=8)

        return asyncio.run(run())


def test_a_deterministic_engine_answers_the_same_bits_alone_and_in_a_batch() -> None:
    report = _check(deterministic=True)
    assert report.passed, report.problems
    assert report.batch_sizes == [1, 4] and report.tokens_compared == 8
    assert report.engine_deterministic and report.torch_deterministic


def test_a_batching_engine_fails_the_check_naming_the_first_logprob_that_differs() -> None:
    report = _check(deterministic=False)
    assert not report.passed
    assert "the policy engine is not in deterministic mode" in report.problems[0]
    assert any(p.startswith("logprob of token 0:") and "in a batch of 4" in p for p in report.problems), report


def _config(tmp_path: Path) -> GRPOConfig:
    return GRPOConfig(
        group_size=2,
        batch_size=2,
        total_steps=1,
        max_new_tokens=4,
        device="cpu",
        deterministic=True,
        metrics_path=str(tmp_path / "metrics.jsonl"),
    )


def _fit(algorithm: GRPO, store: InMemoryLightningStore) -> None:
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=store,
        runner={"poll_interval": 0.05},
        strategy={"type": "shm", "n_runners": 2, "main_thread": "algorithm"},
    )
    trainer.fit(vowel_agent, train_dataset=TASKS[:2])


def test_a_deterministic_run_records_its_passed_check_in_run_json(tmp_path: Path) -> None:
    model, tokenizer = tiny_model()
    algorithm = GRPO(_config(tmp_path), model=model, tokenizer=tokenizer)
    _fit(algorithm, InMemoryLightningStore())
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["deterministic"] is True and run["determinism_check"]["passed"] is True
    assert run["determinism_check"]["tokens_compared"] == 16 and run["determinism_check"]["problems"] == []
    assert run["summary"]["steps"] == 1 and run["summary"]["weight_syncs_verified"] == 1
    assert "self-check passed (16 tokens bit-identical at batch sizes [1, 4])" in run["summary"]["line"]
    assert run == algorithm.run_metadata


class FlagNotPassed(GRPO):
    """A GRPO whose deterministic flag never reaches the policy engine (the bug the self-check exists for)."""

    def build(self) -> Any:
        learner, server = super().build()
        server.engine.deterministic = False
        return learner, server


def test_a_run_whose_flag_does_not_reach_the_engine_refuses_to_start(tmp_path: Path) -> None:
    model, tokenizer = batch_sensitive_model()
    algorithm = FlagNotPassed(_config(tmp_path), model=model, tokenizer=tokenizer)
    store = InMemoryLightningStore()
    with pytest.raises(DeterminismError, match=r"not in deterministic mode.*logprob of token 0: .* in a batch of 4"):
        _fit(algorithm, store)
    assert len(asyncio.run(store.query_rollouts())) == 0, "no rollout ran"
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["determinism_check"]["passed"] is False and run["summary"]["steps"] == 0
    assert "self-check FAILED: the policy engine is not in deterministic mode" in run["summary"]["line"]
