"""One GRPO step with verl on a GPU: runners -> LLM proxy -> verl's vLLM replica, then an FSDP update.

Needs a CUDA GPU and verl's GPU stack: `pip install -e '.[dev,verl]'` (verl 0.9.1 with its own dependencies,
vLLM 0.24, Ray; verl pins transformers<5.11, so not together with the `train` extra's transformers 5.2x).
Runs with our defaults (trajectory samples, one advantage per rollout, per-rollout loss) and checks that the
step ran to its checkpoint.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.timeout(1800)]


def _gpu_stack_problem() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (torch.cuda.is_available() is False)"
    for package in ("verl", "vllm", "ray", "codetiming", "torchdata", "datasets", "tensordict", "hydra"):
        if importlib.util.find_spec(package) is None:
            return f"needs the verl extra with its GPU stack ({package} missing): pip install 'agentlightning[verl]'"
    return None


@pytest.mark.skipif(_gpu_stack_problem() is not None, reason=str(_gpu_stack_problem()))
def test_one_grpo_step_on_a_tiny_model(tmp_path: Path) -> None:
    from openai import AsyncOpenAI

    import agentlightning as agl
    from agentlightning.types import LLM
    from tests.support.tiny_model import tiny_model

    # head_dim 64 (hidden 256 / 4 heads): a size every vLLM attention backend takes.
    model, tokenizer = tiny_model(hidden_size=256)
    model_dir = tmp_path / "tiny" / "policy"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)

    @agl.rollout
    async def agent(task: dict[str, Any], llm: LLM) -> float:
        client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task["question"]}], max_tokens=8
        )
        return float("yes" in (reply.choices[0].message.content or ""))

    config = {
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
        "data": {"train_batch_size": 4, "max_prompt_length": 64, "max_response_length": 16},
        "actor_rollout_ref": {
            "model": {"path": str(model_dir)},
            "rollout": {
                "n": 2,
                "tensor_model_parallel_size": 1,
                "gpu_memory_utilization": 0.3,
                "log_prob_micro_batch_size_per_gpu": 4,
            },
            "actor": {"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 4, "use_kl_loss": False},
        },
        "trainer": {
            "n_gpus_per_node": 1,
            "nnodes": 1,
            "val_before_train": False,
            "logger": ["console"],
            "total_training_steps": 1,
            "total_epochs": 1,
            "save_freq": 1,
            "test_freq": -1,
            "default_local_dir": str(tmp_path / "ckpt"),
        },
    }
    store = agl.InMemoryLightningStore(thread_safe=True)
    trainer = agl.Trainer(algorithm=agl.VERL(config), store=store, n_runners=2)
    trainer.fit(agent, train_dataset=[{"question": f"say yes {i}"} for i in range(4)])

    import asyncio

    rollouts = asyncio.run(store.query_rollouts(status_in=["succeeded"])).items
    assert len(rollouts) == 8, "train_batch_size x rollout.n rollouts ran through our runners"
    assert (tmp_path / "ckpt" / "global_step_1").is_dir(), "the update ran and the step was checkpointed"
