"""`python -m agentlightning.verl key=value ...`: train with VERL from the command line, as v0.3's Hydra entry did.

The config is verl's PPO trainer config + ours (`config.yaml`), then an optional YAML file (`--config FILE`,
or Hydra's `--config-path DIR --config-name NAME`), then `key=value` overrides (Hydra's syntax: `+key=` and
`++key=` are accepted too; values are parsed as YAML, so `trainer.logger=[console,wandb]` is a list).
Tasks come from parquet files, `data.train_files` / `data.val_files` (a path or a list), one dict per row.
Each rollout runs `agentlightning.local.agent_class` in its own process (v1.0's agent contract; see
`ProcessAgent`), with `agentlightning.local.env_map` passing task fields as environment variables.

`--dry-run` stops before Ray and the GPUs: it merges and validates the config, reads the parquet files,
checks that the agent class imports and that env_map's fields exist, and prints what training would do.
`--cfg job` prints the merged config.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from .config import merge_config, served_model_name

__all__ = ["build_config", "load_parquet_tasks", "env_map_fields", "dry_run_summary", "fit_harnessed_agent", "main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agentlightning.verl",
        description="Train an agent with VERL: key=value overrides over verl's ppo_trainer config and ours.",
        epilog=(
            "example:\n  python -m agentlightning.verl data.train_files=train.parquet data.val_files=test.parquet \\\n"
            "      actor_rollout_ref.model.path=Qwen/Qwen2.5-1.5B-Instruct \\\n"
            "      agentlightning.local.agent_class=my_agents.calc:CalcAgent \\\n"
            "      agentlightning.local.env_map='{QUESTION: question}' --dry-run"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides (Hydra syntax)")
    parser.add_argument("--config", help="a YAML config merged before the overrides")
    parser.add_argument("--config-path", help="Hydra-style: folder of --config-name")
    parser.add_argument("--config-name", help="Hydra-style: YAML file name (without .yaml) in --config-path")
    parser.add_argument("--dry-run", action="store_true", help="validate config, data and agent; do not train")
    parser.add_argument("--cfg", choices=["job"], help="print the merged config (Hydra's --cfg job) and exit")
    return parser


def _config_file(args: argparse.Namespace) -> Optional[Path]:
    if args.config:
        return Path(args.config)
    if args.config_name:
        name = args.config_name if args.config_name.endswith(".yaml") else f"{args.config_name}.yaml"
        return Path(args.config_path or ".") / name
    return None


def build_config(argv: Sequence[str]) -> tuple[Any, argparse.Namespace]:
    """The merged, validated config of a command line, and its parsed options."""
    from omegaconf import OmegaConf

    args = _parser().parse_args(list(argv))
    layers: list[Any] = []
    path = _config_file(args)
    if path is not None:
        if not path.is_file():
            raise ValueError(f"config file {str(path)!r} does not exist")
        layers.append(OmegaConf.load(path))
    for override in args.overrides:
        key, sep, _ = override.partition("=")
        if not sep or not key.lstrip("+"):
            raise ValueError(f"override {override!r} is not key=value (e.g. data.train_batch_size=32)")
    layers.append(OmegaConf.from_dotlist([override.lstrip("+") for override in args.overrides]))
    return merge_config(OmegaConf.merge(*layers)), args


def _files(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(item) for item in value]


def load_parquet_tasks(files: Any, key: str) -> Optional[list[dict[str, Any]]]:
    """The rows of the parquet file(s) at config `key` as task dicts (None when the key is unset)."""
    paths = _files(files)
    if not paths:
        return None
    try:
        import pyarrow.parquet as parquet
    except ImportError as exc:
        raise ImportError(f"reading {key} needs pyarrow ({exc}); install: pip install pyarrow") from exc
    tasks: list[dict[str, Any]] = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"{key}: parquet file {path!r} does not exist")
        tasks.extend(parquet.read_table(path).to_pylist())
    if not tasks:
        raise ValueError(f"{key}: {paths} hold no rows")
    return tasks


def env_map_fields(env_map: Mapping[str, Any]) -> dict[str, str]:
    """`{ENV: task field}`; v1.0's `input.field` form is accepted (nested paths are not)."""
    fields: dict[str, str] = {}
    for name, path in env_map.items():
        field = str(path).removeprefix("input.")
        if str(path) == "input" or "." in field:
            raise ValueError(
                f"agentlightning.local.env_map[{name!r}]={path!r}: only a top-level task field (e.g. "
                "'question' or 'input.question') can be passed; the whole task is in $AGL_TASK"
            )
        fields[str(name)] = field
    return fields


def _check_fields(tasks: Optional[list[dict[str, Any]]], fields: Mapping[str, str], key: str) -> None:
    for name, field in fields.items():
        if tasks and field not in tasks[0]:
            raise ValueError(f"env_map[{name!r}] reads field {field!r}, but {key} rows have {sorted(tasks[0])}")


def dry_run_summary(
    config: Any, train: Optional[list[dict[str, Any]]], val: Optional[list[dict[str, Any]]]
) -> dict[str, Any]:
    """What a run would do: tasks, steps, rollouts per step, the RL settings, the agent, the versions."""
    from .versions import check_versions

    agl = config.agentlightning
    batch = int(config.data.train_batch_size)
    steps_per_epoch = len(train) // batch if train else 0
    total = config.trainer.get("total_training_steps") or steps_per_epoch * int(config.trainer.total_epochs)
    try:
        versions: Any = check_versions(require_vllm=True)
    except RuntimeError as exc:
        versions = f"not ready to train here: {exc}"
    return {
        "model": str(config.actor_rollout_ref.model.path),
        "served_model_name": served_model_name(config.actor_rollout_ref.model.path),
        "train_tasks": len(train or []),
        "val_tasks": len(val or []),
        "train_batch_size": batch,
        "rollouts_per_task": int(config.actor_rollout_ref.rollout.n),
        "rollouts_per_step": batch * int(config.actor_rollout_ref.rollout.n),
        "steps_per_epoch": steps_per_epoch,
        "total_training_steps": int(total),
        "trace_aggregation": str(agl.trace_aggregator.level),
        "advantage_level": str(agl.advantage_level),
        "loss_aggregation": str(agl.loss_aggregation),
        "max_ppo_update_times": agl.get("max_ppo_update_times"),
        "async_rollout": bool(agl.async_rollout.enabled),
        "agent_class": agl.local.get("agent_class"),
        "env_map": dict(agl.local.get("env_map") or {}),
        "gpus": int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes),
        "versions": versions,
    }


def _agent(config: Any) -> Any:
    from agentlightning.litagent import ProcessAgent

    local = config.agentlightning.local
    if not local.get("agent_class"):
        raise ValueError(
            "set agentlightning.local.agent_class=package.module:Class (or path/to/file.py:Class): the agent each "
            "rollout runs (v1.0's contract: it reads AGL_OPENAI_BASE_URL, AGL_EVENT_URL and AGL_KEY)"
        )
    return ProcessAgent(agent_class=str(local.agent_class), env_map=env_map_fields(dict(local.get("env_map") or {})))


def fit_harnessed_agent(
    config: Any, train_dataset: Optional[Sequence[Any]], val_dataset: Optional[Sequence[Any]]
) -> None:
    """Train `agentlightning.local.agent_class` with VERL through our Trainer, runners and gateway."""
    import agentlightning as agl

    if train_dataset is None:
        raise ValueError("VERL needs tasks: set data.train_files (parquet) or pass train_dataset")
    merged = merge_config(config)
    agent = _agent(merged)
    # Runner threads are enough: each rollout's agent runs in its own process anyway (ProcessAgent).
    strategy = {"type": "shm", "n_runners": int(merged.agentlightning.n_runners), "main_thread": "algorithm"}
    trainer = agl.Trainer(algorithm=agl.VERL(merged), strategy=strategy)
    trainer.fit(agent, train_dataset=list(train_dataset), val_dataset=list(val_dataset) if val_dataset else None)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from omegaconf import OmegaConf

    try:
        config, args = build_config(sys.argv[1:] if argv is None else argv)
        if args.cfg == "job":
            print(OmegaConf.to_yaml(config))
            return 0
        train = load_parquet_tasks(config.data.get("train_files"), "data.train_files")
        val = load_parquet_tasks(config.data.get("val_files"), "data.val_files")
        fields = env_map_fields(dict(config.agentlightning.local.get("env_map") or {}))
        _check_fields(train, fields, "data.train_files")
        _check_fields(val, fields, "data.val_files")
        if args.dry_run:
            if config.agentlightning.local.get("agent_class"):
                from agentlightning._process_entry import load_agent_class

                load_agent_class(str(config.agentlightning.local.agent_class))
            summary = dry_run_summary(config, train, val)
            if train is None:
                raise ValueError("data.train_files is not set: give the parquet file(s) of the training tasks")
            print(json.dumps(summary, indent=2, default=str))
            return 0
        fit_harnessed_agent(config, train, val)
    except (ValueError, ImportError, FileNotFoundError, TypeError) as exc:
        print(f"python -m agentlightning.verl: {exc}", file=sys.stderr)
        return 2
    return 0
