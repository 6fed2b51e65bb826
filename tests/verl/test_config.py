"""The VERL config (verl's defaults + ours + the user's), its validation, version checks and `agl.VERL`."""

from __future__ import annotations

from typing import Any

import pytest

import agentlightning as agl
from agentlightning.verl.versions import SUPPORTED_VERSIONS, check_versions

pytest.importorskip("omegaconf", reason="the VERL config needs omegaconf (dev extra)")
pytest.importorskip("verl", reason="the default config comes from verl (the Makefile installs verl --no-deps)")

from agentlightning.verl.config import load_default_config, merge_config  # noqa: E402

MODEL = {"actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"}}}


def _with(overrides: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {"actor_rollout_ref": {"model": {"path": "Qwen/Qwen2.5-0.5B-Instruct"}}}
    for section, values in overrides.items():
        if section == "actor_rollout_ref":
            merged["actor_rollout_ref"].update(values)
        else:
            merged[section] = values
    return merged


def test_default_config_is_verl_ppo_trainer_plus_agent_lightning_section() -> None:
    config = load_default_config()
    assert config.agentlightning.port == 9999
    assert config.agentlightning.trace_aggregator.level == "transition"
    assert config.agentlightning.trace_aggregator.trajectory_max_prompt_length == 2048
    assert config.agentlightning.trace_aggregator.trajectory_max_response_length == 8192
    assert config.agentlightning.reward_fillna_value == 0.0
    assert config.data.filter_overlong_prompts is False
    assert config.actor_rollout_ref.rollout.mode == "async"
    # Inherited from verl's ppo_trainer.
    assert "adv_estimator" in config.algorithm and "total_epochs" in config.trainer


def test_user_values_win_and_typical_example_keys_are_accepted() -> None:
    config = merge_config(
        _with(
            {
                "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
                "data": {"train_batch_size": 8, "max_prompt_length": 1024, "max_response_length": 256},
                "actor_rollout_ref": {
                    "rollout": {"n": 4, "name": "vllm", "tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.6},
                    "actor": {"ppo_mini_batch_size": 8, "optim": {"lr": 1e-6}, "use_kl_loss": False},
                },
                "trainer": {"n_gpus_per_node": 1, "nnodes": 1, "val_before_train": False, "total_epochs": 1},
                "agentlightning": {"trace_aggregator": {"level": "trajectory"}, "max_attempts": 2},
            }
        )
    )
    assert config.algorithm.adv_estimator == "grpo"
    assert (config.actor_rollout_ref.rollout.n, config.data.train_batch_size) == (4, 8)
    assert config.actor_rollout_ref.actor.optim.lr == 1e-6
    assert config.agentlightning.trace_aggregator.level == "trajectory" and config.agentlightning.max_attempts == 2
    assert config.agentlightning.port == 9999, "untouched defaults stay"


@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"actor_rollout_ref": {"rollout": {"n": 0}}}, "actor_rollout_ref.rollout.n"),
        ({"actor_rollout_ref": {"rollout": {"mode": "sync"}}}, "actor_rollout_ref.rollout.mode"),
        ({"actor_rollout_ref": {"rollout": {"name": "hf"}}}, "actor_rollout_ref.rollout.name"),
        ({"data": {"train_batch_size": 0}}, "data.train_batch_size"),
        ({"data": {"max_response_length": -1}}, "data.max_response_length"),
        ({"agentlightning": {"trace_aggregator": {"level": "episode"}}}, "agentlightning.trace_aggregator.level"),
        ({"agentlightning": {"llm_timeout_seconds": 0}}, "agentlightning.llm_timeout_seconds"),
        ({"agentlightning": {"reward_fillna_value": "zero"}}, "agentlightning.reward_fillna_value"),
    ],
)
def test_bad_values_name_the_key(overrides: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        merge_config(_with(overrides))


def test_missing_model_path_and_typos_are_refused() -> None:
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.model\.path"):
        merge_config({})
    with pytest.raises(ValueError, match=r"unknown VERL config key: actor_rollout_ref\.rollout\.nn"):
        merge_config(_with({"actor_rollout_ref": {"rollout": {"nn": 4}}}))


def test_version_check_names_what_is_wrong_and_the_supported_range() -> None:
    good = {"verl": "0.9.1", "vllm": "0.24.0", "torch": "2.11.0+cu128"}
    assert check_versions(good) == good
    low, high = SUPPORTED_VERSIONS["verl"]
    with pytest.raises(RuntimeError, match=rf"verl 0\.5\.0 is installed, but .* supports verl>={low},<{high}"):
        check_versions({**good, "verl": "0.5.0"})
    with pytest.raises(RuntimeError, match=r"vllm is not installed"):
        check_versions({**good, "vllm": None})
    with pytest.raises(RuntimeError, match=r"torch 2\.7\.0 is installed.*agentlightning\[verl\]"):
        check_versions({**good, "torch": "2.7.0"})
    assert check_versions({**good, "vllm": None}, require_vllm=False)["vllm"] is None


def test_agl_verl_factory_builds_the_algorithm_and_checks_versions_at_start() -> None:
    algorithm = agl.VERL(_with({"actor_rollout_ref": {"rollout": {"n": 2}}}))
    from agentlightning.algorithm.verl import VERL

    assert isinstance(algorithm, VERL)
    assert algorithm.config.actor_rollout_ref.rollout.n == 2
    assert algorithm.versions["verl"] is not None
    try:
        import vllm  # noqa: F401  # type: ignore[import-not-found]
    except ImportError:
        # On CPU machines vLLM is absent: run() must stop before touching Ray or GPUs, and say why.
        with pytest.raises(RuntimeError, match="vllm is not installed"):
            algorithm.run(train_dataset=[{"q": 1}])


def test_agl_verl_rejects_a_bad_config_at_construction() -> None:
    with pytest.raises(ValueError, match=r"data\.train_batch_size"):
        agl.VERL(_with({"data": {"train_batch_size": 0}}))


def test_skip_version_check_is_honoured() -> None:
    algorithm = agl.VERL(_with({"agentlightning": {"skip_version_check": True}}))
    assert algorithm.skip_version_check and not hasattr(algorithm, "versions")
