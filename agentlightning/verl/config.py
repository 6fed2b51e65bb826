"""The VERL config: verl's PPO trainer defaults + `agentlightning/verl/config.yaml` + the user's overrides.

The merge is strict where verl's schema is closed (a misspelled key raises ValueError naming its path)
and open where verl's is: dicts passed through to engines and models (`engine_kwargs.*`,
`override_config`, `*_kwargs`, `custom_*`, and every dict-typed field of verl 0.9.1's config dataclasses).
v1.0's names for our RL settings are accepted: `algorithm.enable_rollout_level_advantage` and
`actor_rollout_ref.actor.policy_loss.loss_mode: per_rollout_mean` (see `translate_v1_keys`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import importlib.util
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from agentlightning.tracking import Tracker, make_tracker, parse_backends

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "load_default_config",
    "merge_config",
    "validate_config",
    "translate_v1_keys",
    "daemon_options",
    "served_model_name",
    "make_verl_tracker",
]

DEFAULT_CONFIG_PATH = Path(__file__).with_name("config.yaml")

_VERL_COMPOSED_DEFAULT = "trainer/config/_generated_ppo_trainer.yaml"
_ROLLOUT_ENGINES = ("vllm", "sglang")
_AGGREGATION_LEVELS = ("transition", "trajectory")
_ADVANTAGE_LEVELS = ("rollout", "sample")
_LOSS_AGGREGATIONS = ("per_rollout_mean", "verl")
_OPEN_BY_NAME = re.compile(r"(^|_)kwargs$|^custom_|^override_")
PER_ROLLOUT_MEAN = "per_rollout_mean"


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


@functools.lru_cache(maxsize=1)
def _default_config() -> Any:
    omegaconf = _omegaconf()
    base = omegaconf.load(_verl_default_path())
    overlay = omegaconf.load(DEFAULT_CONFIG_PATH)
    for hydra_only in ("hydra", "defaults"):
        overlay.pop(hydra_only, None)
    # The overlay adds the `agentlightning` section, so it merges before the config is made strict.
    return omegaconf.merge(base, overlay)


def load_default_config() -> Any:
    """verl's composed `ppo_trainer` config with agent-lightning's additions (an OmegaConf `DictConfig`)."""
    return copy.deepcopy(_default_config())


@functools.cache
def _dict_fields(target: str) -> frozenset[str]:
    """Fields of the verl config dataclass `target` that hold free-form dicts (empty if it cannot be imported)."""
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except Exception:  # verl's GPU-side imports may be missing on CPU: fall back to the name rules
        return frozenset()
    if not dataclasses.is_dataclass(cls):
        return frozenset()
    fields = dataclasses.fields(cls)
    return frozenset(f.name for f in fields if "dict" in str(f.type).lower() and "Config" not in str(f.type))


def _open_dicts(node: Any, name: str = "") -> Iterator[Any]:
    """The dict nodes of verl's config that take any key: pass-through kwargs, overrides, custom plug-ins."""
    from omegaconf import DictConfig

    if not isinstance(node, DictConfig):
        return
    target = node.get("_target_") if "_target_" in node else None
    if target is None and (len(node) == 0 or _OPEN_BY_NAME.search(name)):
        yield node
        return
    open_fields = _dict_fields(str(target)) if target else frozenset()
    for key in node.keys():
        child = node._get_node(key)  # type: ignore[union-attr]
        if key in open_fields and isinstance(child, DictConfig):
            yield child
        else:
            yield from _open_dicts(child, str(key))


def translate_v1_keys(config: Mapping[str, Any] | Any) -> dict[str, Any]:
    """`config` as a plain dict with v1.0's spellings of our settings moved under `agentlightning`."""
    omegaconf = _omegaconf()
    data: dict[str, Any] = (
        omegaconf.to_container(config, resolve=False) if omegaconf.is_config(config) else _plain(config)  # type: ignore[assignment]
    )
    algorithm = data.get("algorithm")
    if isinstance(algorithm, dict) and "enable_rollout_level_advantage" in algorithm:
        enabled = algorithm.pop("enable_rollout_level_advantage")
        data.setdefault("agentlightning", {})["advantage_level"] = "rollout" if enabled else "sample"
    agl = data.get("agentlightning")
    if isinstance(agl, dict) and "rollout_timeout_seconds" in agl:
        agl["llm_timeout_seconds"] = agl.pop("rollout_timeout_seconds")
    policy_loss = ((data.get("actor_rollout_ref") or {}).get("actor") or {}).get("policy_loss")
    if isinstance(policy_loss, dict) and policy_loss.get("loss_mode") == PER_ROLLOUT_MEAN:
        # Ours, not a verl loss: the driver weighs each rollout's tokens; the workers run verl's vanilla loss.
        policy_loss["loss_mode"] = "vanilla"
        data.setdefault("agentlightning", {})["loss_aggregation"] = PER_ROLLOUT_MEAN
    return data


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}  # type: ignore[reportUnknownVariableType]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]  # type: ignore[reportUnknownVariableType]
    return value


def merge_config(config: Mapping[str, Any] | Any) -> Any:
    """Merge `config` (dict or DictConfig) over the default; unknown keys outside verl's open dicts are
    refused with their path, then the result is validated."""
    omegaconf = _omegaconf()
    from omegaconf.errors import ConfigKeyError

    default = load_default_config()
    omegaconf.set_struct(default, True)
    for node in list(_open_dicts(default)):
        omegaconf.set_struct(node, False)
    config = translate_v1_keys(config)
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
        ("agentlightning.advantage_level", lambda v: v in _ADVANTAGE_LEVELS, f"one of {_ADVANTAGE_LEVELS}"),
        ("agentlightning.loss_aggregation", lambda v: v in _LOSS_AGGREGATIONS, f"one of {_LOSS_AGGREGATIONS}"),
        ("agentlightning.max_ppo_update_times", lambda v: v is None or _int(v) >= 1, "null or >= 1"),
        ("agentlightning.async_rollout.max_staleness", lambda v: _int(v) >= 0, ">= 0"),
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
    loss_agg_mode = _get(config, "actor_rollout_ref.actor.loss_agg_mode")
    if _get(config, "agentlightning.loss_aggregation") == PER_ROLLOUT_MEAN and loss_agg_mode != "token-mean":
        raise ValueError(
            f"VERL config agentlightning.loss_aggregation=per_rollout_mean weighs verl's token-mean loss, but "
            f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode!r}; set it to token-mean, or "
            "agentlightning.loss_aggregation=verl"
        )
    if _get(config, "agentlightning.async_rollout.enabled"):
        size, batch = (
            _get(config, "agentlightning.async_rollout.async_train_batch_size"),
            _get(config, "data.train_batch_size"),
        )
        if size is not None and _int(size) <= _int(batch):
            raise ValueError(
                f"VERL config agentlightning.async_rollout.async_train_batch_size={size!r} is invalid: tasks kept "
                f"in flight must exceed data.train_batch_size={batch} (or null: twice it)"
            )
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


def served_model_name(model_path: str) -> str:
    """The name verl's vLLM servers serve a model under: the last two components of its path."""
    return "/".join(str(model_path).rstrip("/").split("/")[-2:])


def daemon_options(config: Any) -> dict[str, Any]:
    """`AgentModeDaemon` keyword arguments read from a merged VERL config (all but the components)."""
    agl = config.agentlightning
    aggregator = agl.trace_aggregator
    asynchronous = agl.get("async_rollout") or {}
    enabled = bool(asynchronous.get("enabled", False))
    in_flight = asynchronous.get("async_train_batch_size") or 2 * int(config.data.train_batch_size)
    return {
        "port": agl.get("port"),
        "train_rollout_n": int(config.actor_rollout_ref.rollout.n),
        "train_information": {
            "model": served_model_name(config.actor_rollout_ref.model.path),
            "temperature": config.actor_rollout_ref.rollout.temperature,
        },
        "mini_batch_size": int(config.actor_rollout_ref.actor.ppo_mini_batch_size),
        "reward_fillna_value": agl.get("reward_fillna_value", 0.0),
        "llm_timeout_seconds": agl.get("llm_timeout_seconds", 1200.0),
        "trace_aggregation": aggregator.level,
        "mismatch_log_dir": aggregator.mismatch_log_dir if aggregator.get("debug") else None,
        "max_attempts": agl.get("max_attempts", 1),
        "batch_timeout_seconds": agl.get("batch_timeout_seconds"),
        "async_rollout": enabled,
        "max_staleness": int(asynchronous.get("max_staleness", 1)),
        "max_in_flight": int(in_flight) if enabled else None,
        "train_groups": int(config.data.train_batch_size) if enabled else None,
    }
