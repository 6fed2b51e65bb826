"""The VERL config (verl's defaults + ours + the user's), its validation, version checks and `agl.VERL`."""

from __future__ import annotations

from pathlib import Path
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
    # v1.0's RL defaults: trajectories, one advantage per rollout, every rollout weighing the same.
    assert config.agentlightning.trace_aggregator.level == "trajectory"
    assert config.agentlightning.advantage_level == "rollout"
    assert config.agentlightning.loss_aggregation == "per_rollout_mean"
    assert config.agentlightning.max_ppo_update_times is None
    assert (
        config.agentlightning.async_rollout.enabled is False and config.agentlightning.async_rollout.max_staleness == 1
    )
    assert config.actor_rollout_ref.actor.calculate_entropy is True
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


CONFIGS = Path(__file__).with_name("configs")


def test_the_keys_v0_3_examples_set_are_accepted_open_dicts_included() -> None:
    from omegaconf import OmegaConf

    config = merge_config(OmegaConf.load(CONFIGS / "tool_agent_grpo.yaml"))
    rollout = config.actor_rollout_ref.rollout
    assert rollout.engine_kwargs.vllm.enable_auto_tool_choice is True
    assert rollout.engine_kwargs.vllm.tool_call_parser == "hermes"
    assert rollout.multi_turn.format == "hermes"
    assert list(config.trainer.logger) == ["console", "wandb"]
    assert config.actor_rollout_ref.actor.fsdp_config.param_offload is True
    assert config.actor_rollout_ref.ref.fsdp_config.param_offload is True


@pytest.mark.parametrize(
    "path",
    [
        "actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend",
        "actor_rollout_ref.rollout.engine_kwargs.vllm.max_num_batched_tokens",
        "actor_rollout_ref.model.override_config.attention_dropout",
        "actor_rollout_ref.model.lora.rank",
        "data.apply_chat_template_kwargs.enable_thinking",
        "data.custom_cls.extra",
        "ray_kwargs.ray_init.num_cpus",
        "actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params",
    ],
)
def test_open_dicts_of_verl_take_any_key(path: str) -> None:
    from omegaconf import OmegaConf

    config = merge_config(OmegaConf.merge(OmegaConf.create(MODEL), OmegaConf.from_dotlist([f"{path}=7"])))
    assert OmegaConf.select(config, path) == 7


@pytest.mark.parametrize(
    "path",
    [
        "actor_rollout_ref.rollout.multi_turn.formatt",
        "actor_rollout_ref.rollout.val_kwargs.temprature",
        "actor_rollout_ref.actor.fsdp_config.param_ofload",
        "trainer.loggers",
        "agentlightning.trace_aggregator.levle",
    ],
)
def test_a_misspelled_closed_key_is_refused_with_its_path(path: str) -> None:
    from omegaconf import OmegaConf

    overrides = OmegaConf.merge(OmegaConf.create(MODEL), OmegaConf.from_dotlist([f"{path}=1"]))
    with pytest.raises(ValueError, match=rf"unknown VERL config key: {path.replace('.', r'[.]')}"):
        merge_config(overrides)


def test_v1_spellings_of_the_rl_settings_are_accepted() -> None:
    config = merge_config(
        _with(
            {
                "algorithm": {"enable_rollout_level_advantage": False},
                "actor_rollout_ref": {"actor": {"policy_loss": {"loss_mode": "per_rollout_mean"}}},
                "agentlightning": {"rollout_timeout_seconds": 60, "max_ppo_update_times": 2},
            }
        )
    )
    assert config.agentlightning.advantage_level == "sample"
    assert config.agentlightning.loss_aggregation == "per_rollout_mean"
    assert config.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla", "the workers run verl's own loss"
    assert config.agentlightning.llm_timeout_seconds == 60 and config.agentlightning.max_ppo_update_times == 2
    with pytest.raises(ValueError, match="loss_agg_mode"):
        merge_config(_with({"actor_rollout_ref": {"actor": {"loss_agg_mode": "seq-mean-token-sum"}}}))
    with pytest.raises(ValueError, match="async_train_batch_size"):
        merge_config(
            _with(
                {
                    "data": {"train_batch_size": 4},
                    "agentlightning": {"async_rollout": {"enabled": True, "async_train_batch_size": 4}},
                }
            )
        )
