"""tinker-cookbook recipes against `agl tinker`: the supervised and RL curves, and steps/s.

Starts a `TinkerServer` in this process on a model (default: a tiny random Llama built from a config and
saved to a temporary folder), then runs two cookbook recipes unmodified through their own entry points, with
the arguments a user types, fully offline (see docs/tinker.md):

- `chat_sl.train` on the cookbook's `example_data/conversations.jsonl` (`renderer_name=role_colon`);
- `math_rl.train env=arithmetic` (`loss_fn=importance_sampling`).

    python benchmarks/tinker_recipes.py                               # tiny model, 8 SL + 10 RL steps
    python benchmarks/tinker_recipes.py --model smollm2 --sl-steps 8 --rl-steps 6 --sl-lr 5e-4 --rl-lr 5e-4 \
        --rl-max-tokens 8 --threads 2 --json runs/tinker_smollm2.json
    python benchmarks/tinker_recipes.py --model ./my-model                       # any local HF causal LM folder

`--model smollm2` serves SmolLM2-135M-Instruct under its converted folder (the recipes load the tokenizer
from `model_name`, so it must be a folder).

Prints a table (first/last NLL and reward, steps/s), writes the curves to `--plot` (PNG) and everything to
`--json`. Numbers depend on the machine and its load; nothing here gates CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

API_KEY = "tml-benchmark"


def _tiny_model(folder: Path) -> str:
    from tests.support.tiny_model import tiny_model

    model, tokenizer = tiny_model(seed=0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _metrics(log_path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines() if line.strip()]


def run_sl(model: str, base_url: str, steps: int, log_path: Path, lr: float) -> Dict[str, Any]:
    import chz
    from tinker_cookbook.recipes.chat_sl import train

    data = Path(train.__file__).parents[2] / "example_data" / "conversations.jsonl"
    argv = [
        f"model_name={model}",
        f"dataset={data}",
        "renderer_name=role_colon",
        "batch_size=16",
        f"max_steps={steps}",
        "num_epochs=10",
        f"learning_rate={lr}",
        "lr_schedule=constant",
        "lora_rank=8",
        f"log_path={log_path}",
        "behavior_if_log_dir_exists=delete",
        f"base_url={base_url}",
        "eval_every=0",
        "save_every=0",
    ]
    started = time.perf_counter()
    train.cli_main(chz.entrypoint(train.CLIConfig, argv=argv))
    elapsed = time.perf_counter() - started
    rows = [r for r in _metrics(log_path) if "train_mean_nll" in r]
    step_time = sum(r.get("time/step", 0.0) for r in rows)
    return {
        "steps": len(rows),
        "nll": [r["train_mean_nll"] for r in rows],
        "wall_s": elapsed,
        "steps_per_s": len(rows) / step_time if step_time else None,
    }


def run_rl(model: str, base_url: str, steps: int, log_path: Path, lr: float, max_tokens: int) -> Dict[str, Any]:
    import chz
    from tinker_cookbook.recipes.math_rl import train

    argv = [
        f"model_name={model}",
        "env=arithmetic",
        "renderer_name=role_colon",
        "group_size=4",
        "groups_per_batch=4",
        f"max_steps={steps}",
        f"max_tokens={max_tokens}",
        f"learning_rate={lr}",
        "lora_rank=8",
        "loss_fn=importance_sampling",
        f"log_path={log_path}",
        "behavior_if_log_dir_exists=delete",
        f"base_url={base_url}",
        "eval_every=0",
        "save_every=0",
    ]
    started = time.perf_counter()
    asyncio.run(train.cli_main(chz.entrypoint(train.CLIConfig, argv=argv)))
    elapsed = time.perf_counter() - started
    rows = [r for r in _metrics(log_path) if "env/all/reward/total" in r]
    step_time = sum(r.get("time/total", 0.0) for r in rows)
    return {
        "steps": len(rows),
        "reward": [r["env/all/reward/total"] for r in rows],
        "correct": [r.get("env/all/correct", 0.0) for r in rows],
        "wall_s": elapsed,
        "steps_per_s": len(rows) / step_time if step_time else None,
    }


def plot(results: Dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(range(len(results["sl"]["nll"])), results["sl"]["nll"], marker="o")
    left.set(title="chat_sl: train mean NLL", xlabel="step", ylabel="NLL (nats/token)")
    right.plot(range(len(results["rl"]["reward"])), results["rl"]["reward"], marker="o", label="reward")
    right.plot(range(len(results["rl"]["correct"])), results["rl"]["correct"], marker="x", label="correct")
    right.set(title="math_rl env=arithmetic", xlabel="step", ylabel="mean per episode")
    right.legend()
    fig.suptitle(f"tinker-cookbook recipes on agl tinker ({results['model_label']})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help='"tiny" (a config model), "smollm2", or a local folder')
    parser.add_argument("--sl-steps", type=int, default=8)
    parser.add_argument("--rl-steps", type=int, default=10)
    parser.add_argument("--sl-lr", type=float, default=1e-2)
    parser.add_argument("--rl-lr", type=float, default=1e-3)
    parser.add_argument("--rl-max-tokens", type=int, default=5, help="answer length in the RL recipe (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--device", default=None)
    parser.add_argument("--plot", default="runs/tinker_recipes.png")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()

    import torch

    from agentlightning.tinker import TinkerConfig, TinkerServer

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="agl-tinker-bench-"))
    if args.model == "tiny":
        model = _tiny_model(work / "tiny-llama")
    elif args.model == "smollm2":
        from agentlightning.serving.models import smollm2_folder

        model = str(smollm2_folder())  # recipes load the tokenizer from model_name: it must be a folder
    else:
        model = str(Path(args.model).resolve())
    source = "smollm2" if args.model == "smollm2" else model
    os.environ.update(
        TINKER_API_KEY=API_KEY,
        HTTPS_PROXY="http://127.0.0.1:9",
        NO_PROXY="127.0.0.1,localhost",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WANDB_MODE="disabled",
    )
    config = TinkerConfig(
        models={model: source}, checkpoint_dir=str(work / "checkpoints"), api_keys=(API_KEY,), device=args.device
    )
    with TinkerServer(config) as server:
        os.environ["TINKER_BASE_URL"] = server.base_url
        sl = run_sl(model, server.base_url, args.sl_steps, work / "sl", args.sl_lr)
        rl = run_rl(model, server.base_url, args.rl_steps, work / "rl", args.rl_lr, args.rl_max_tokens)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    results: Dict[str, Any] = {
        "model": model,
        "model_label": args.model if args.model in ("tiny", "smollm2") else Path(model).name,
        "device": device,
        "threads": args.threads,
        "settings": {k: getattr(args, k) for k in ("sl_steps", "rl_steps", "sl_lr", "rl_lr", "rl_max_tokens")},
        "load_average": os.getloadavg(),
        "sl": sl,
        "rl": rl,
    }
    print(f"agl tinker + tinker-cookbook, model {results['model_label']} on {device}, load {os.getloadavg()[0]:.1f}")
    print(f"{'recipe':<22} {'steps':>5} {'first':>8} {'last':>8} {'steps/s':>8} {'wall s':>7}")
    print(
        f"{'chat_sl (mean NLL)':<22} {sl['steps']:>5} {sl['nll'][0]:>8.3f} {sl['nll'][-1]:>8.3f} "
        f"{sl['steps_per_s'] or 0:>8.2f} {sl['wall_s']:>7.1f}"
    )
    print(
        f"{'math_rl (reward)':<22} {rl['steps']:>5} {rl['reward'][0]:>8.3f} {rl['reward'][-1]:>8.3f} "
        f"{rl['steps_per_s'] or 0:>8.2f} {rl['wall_s']:>7.1f}"
    )
    plot(results, Path(args.plot))
    print(f"curves: {args.plot}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
