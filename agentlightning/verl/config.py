"""The VERL config: verl's PPO trainer defaults + `agentlightning/verl/config.yaml` + the user's overrides."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentlightning.tracking import Tracker, make_tracker, parse_backends

__all__ = ["DEFAULT_CONFIG_PATH", "load_default_config", "merge_config", "validate_config", "make_verl_tracker"]

DEFAULT_CONFIG_PATH = Path(__file__).with_name("config.yaml")

_VERL_COMPOSED_DEFAULT = "trainer/config/_generated_ppo_trainer.yaml"
_ROLLOUT_ENGINES = ("vllm", "sglang")
_AGGREGATION_LEVELS = ("transition", "trajectory")


def _omegaconf() -> Any:
    try:
        from omegaconf import OmegaConf
    except ImportError as exc:
        raise ImportError(
            f"the VERL config needs omegaconf ({exc}); install: pip install 'agentlightning[verl]'"
        ) from exc
    return OmegaConf


def _verl_default_path() -> Path:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("verl is not installed; install it with: pip install 'agentlightning[verl]'")
    path = Path(next(iter(spec.submodule_search_locations))) / _VERL_COMPOSED_DEFAULT
    if not path.exists():
        raise ImportError(f"{path} is missing; this verl release is not supported (see agentlightning.verl.versions)")
    return path


def load_default_config() -> Any:
    """verl's composed `ppo_trainer` config with agent-lightning's additions (an OmegaConf `DictConfig`)."""
    omegaconf = _omegaconf()
    base = omegaconf.load(_verl_default_path())
    overlay = omegaconf.load(DEFAULT_CONFIG_PATH)
    for hydra_only in ("hydra", "defaults"):
        overlay.pop(hydra_only, None)
    # The overlay adds the `agentlightning` section, so it merges before the config is made strict.
    return omegaconf.merge(base, overlay)


def merge_config(config: Mapping[str, Any] | Any) -> Any:
    """Merge `config` (dict or DictConfig) over the default; unknown keys are refused, then it is validated."""
    omegaconf = _omegaconf()
    from omegaconf.errors import ConfigKeyError

    default = load_default_config()
    omegaconf.set_struct(default, True)
    try:
        merged = omegaconf.merge(default, config)
    except ConfigKeyError as exc:
        raise ValueError(
            f"unknown VERL config key: {exc.full_key or exc}; check the spelling against verl's ppo_trainer.yaml "
            "and agentlightning/verl/config.yaml"
        ) from exc
    omegaconf.set_struct(merged, False)
    validate_config(merged)
    return merged


def _get(config: Any, key: str) -> Any:
    """The value at dotted `key`, None when absent or still `???` (mandatory, unset)."""
    return _omegaconf().select(config, key, default=None, throw_on_missing=False)


def validate_config(config: Any) -> None:
    """Check the fields agent mode relies on; ValueError names the key and what it should be."""
    checks: list[tuple[str, Any, str]] = [
        ("actor_rollout_ref.model.path", lambda v: bool(v), "set it to a Hugging Face model id or path"),
        ("actor_rollout_ref.rollout.mode", lambda v: v == "async", "agent mode needs 'async'"),
        ("actor_rollout_ref.rollout.name", lambda v: v in _ROLLOUT_ENGINES, f"one of {_ROLLOUT_ENGINES}"),
        ("actor_rollout_ref.rollout.n", lambda v: _int(v) >= 1, "rollouts per task, >= 1"),
        ("data.train_batch_size", lambda v: _int(v) >= 1, "tasks per step, >= 1"),
        ("data.max_prompt_length", lambda v: _int(v) >= 1, "token budget, >= 1"),
        ("data.max_response_length", lambda v: _int(v) >= 1, "token budget, >= 1"),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", lambda v: _int(v) >= 1, ">= 1"),
        ("agentlightning.trace_aggregator.level", lambda v: v in _AGGREGATION_LEVELS, f"one of {_AGGREGATION_LEVELS}"),
        ("agentlightning.llm_timeout_seconds", lambda v: _float(v) > 0, "seconds, > 0"),
        ("agentlightning.max_attempts", lambda v: _int(v) >= 1, ">= 1"),
        (
            "agentlightning.reward_fillna_value",
            lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)),
            "a number or null",
        ),
    ]
    for key, is_valid, expected in checks:
        value = _get(config, key)
        if not is_valid(value):
            raise ValueError(f"VERL config {key}={value!r} is invalid: {expected}")
    try:
        parse_backends(list(_get(config, "agentlightning.tracking") or []))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"VERL config agentlightning.tracking is invalid: {exc}") from None


def make_verl_tracker(config: Any) -> Tracker:
    """The `agentlightning.tracking` backends of a VERL config, started with the whole config logged."""
    container = _omegaconf().to_container(config, resolve=True)
    return make_tracker(
        list(_get(config, "agentlightning.tracking") or []) or None,
        config=container,  # type: ignore[arg-type]
        project=_get(config, "trainer.project_name") or None,
        run_name=_get(config, "trainer.experiment_name") or None,
        dir=_get(config, "agentlightning.tracking_dir") or None,
    )


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return -1
    return int(value)


def _float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return -1.0
    return float(value)
