"""tinker-cookbook recipes, unmodified, against `agl tinker` on a tiny config model, fully offline.

Each recipe's own entry point parses the same `key=value` arguments a user types
(`python -m tinker_cookbook.recipes.chat_sl.train ...`); it runs in this process so the test does not pay
for a second interpreter importing torch. Offline: the pricing file fetch at start goes to a closed
loopback port (HTTPS_PROXY) and fails fast, as the cookbook allows; tokenizers load from the model folder.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("tinker_cookbook", reason="tinker-cookbook is not installed (make test installs it)")

import chz  # noqa: E402

from agentlightning.tinker import TinkerServer  # noqa: E402

pytestmark = [pytest.mark.train, pytest.mark.slow]


@pytest.fixture
def offline(tinker_env: TinkerServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[TinkerServer]:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    yield tinker_env


def _metrics(log_path: Path) -> list[dict]:
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_chat_sl_recipe_loss_falls(offline: TinkerServer, tiny_model_path: str, tmp_path: Path) -> None:
    from tinker_cookbook.recipes.chat_sl import train

    data = Path(train.__file__).parents[2] / "example_data" / "conversations.jsonl"
    argv = [
        f"model_name={tiny_model_path}",
        f"dataset={data}",
        "renderer_name=role_colon",
        "batch_size=16",
        "max_steps=4",
        "learning_rate=1e-2",
        "lora_rank=8",
        f"log_path={tmp_path / 'sl'}",
        "behavior_if_log_dir_exists=delete",
        f"base_url={offline.base_url}",
        "eval_every=0",
        "save_every=0",
    ]
    train.cli_main(chz.entrypoint(train.CLIConfig, argv=argv))

    nll = [row["train_mean_nll"] for row in _metrics(tmp_path / "sl") if "train_mean_nll" in row]
    assert len(nll) == 4
    assert nll[-1] < nll[0], nll
    # The recipe saved its final state and sampler weights through save_weights / save_weights_for_sampler.
    run_id = next(iter(offline.service.runs))
    kinds = {record.kind for record in offline.service.checkpoints[run_id]}
    assert kinds == {"weights", "sampler_weights"}


def test_math_rl_arithmetic_recipe_records_reward_trend(
    offline: TinkerServer, tiny_model_path: str, tmp_path: Path
) -> None:
    from tinker_cookbook.recipes.math_rl import train

    argv = [
        f"model_name={tiny_model_path}",
        "env=arithmetic",
        "renderer_name=role_colon",
        "group_size=4",
        "groups_per_batch=4",
        "max_steps=3",
        "max_tokens=5",
        "learning_rate=1e-3",
        "lora_rank=8",
        "loss_fn=importance_sampling",
        f"log_path={tmp_path / 'rl'}",
        "behavior_if_log_dir_exists=delete",
        f"base_url={offline.base_url}",
        "eval_every=0",
        "save_every=0",
    ]
    asyncio.run(train.cli_main(chz.entrypoint(train.CLIConfig, argv=argv)))

    rows = [row for row in _metrics(tmp_path / "rl") if "env/all/reward/total" in row]
    assert [row["step"] for row in rows] == [0, 1, 2]
    for row in rows:
        # Every rollout was sampled and trained on: 4 groups x 4 samples of at most 5 tokens each.
        assert row["env/all/total_episodes"] == 16
        assert 0 < row["env/all/ac_tokens_per_turn"] <= 5
        # Sampler and learner agree on the sampled tokens' logprobs (same weights, two code paths).
        assert abs(row["optim/kl_sample_train_v1"]) < 1e-3
    # The live policy served a new weights version for each step's sampler checkpoint.
    run_id = next(iter(offline.service.runs))
    assert offline.service.samplers.live[run_id].version >= 3
