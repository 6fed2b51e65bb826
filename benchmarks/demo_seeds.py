"""Seed study of the demo: `make demo` as it is against an RFT warm start, at the same training-time budget.

Runs `examples/grpo_calculator/train_calculator.py` once per seed and arm, one run at a time (each uses the
whole machine), the arms alternating so that a drift of the machine touches both alike. Every run evaluates
the 16 held-out tasks greedily after each step (`--eval-every 1 --sampled-evals ends`) and stops at the
step during which its training time (held-out evaluations left out, the warm start counted) reaches
`--time-budget`. The table gives, per run, the best held-out greedy accuracy, whether and when (training
seconds) it first reached `--threshold`, and per arm how many runs got there.

    python benchmarks/demo_seeds.py                    # 5 seeds x 2 arms, about 80 min on 2 cores
    python benchmarks/demo_seeds.py --report --json    # the table of runs already in --output-dir
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "grpo_calculator" / "train_calculator.py"


def run_dir(output_dir: Path, arm: str, seed: int) -> Path:
    return output_dir / f"{arm}-seed{seed}"


def run_one(args: argparse.Namespace, arm: str, seed: int) -> None:
    out = run_dir(args.output_dir, arm, seed)
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(DEMO), "--seed", str(seed), "--warm-start", arm, "--output-dir", str(out)]
    command += ["--time-budget", str(args.time_budget), "--steps", str(args.max_steps)]
    command += ["--eval-every", "1", "--sampled-evals", "ends", "--no-checkpoints", *args.demo_args]
    began = time.perf_counter()
    with (out / "log.txt").open("w", encoding="utf-8") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, check=False).returncode
    last = (out / "log.txt").read_text(encoding="utf-8").strip().splitlines()[-1:] or [""]
    print(f"{arm:>4} seed {seed}: exit {code}, {time.perf_counter() - began:.0f} s: {last[0]}", flush=True)


def read_run(output_dir: Path, arm: str, seed: int, threshold: float) -> Optional[Dict[str, Any]]:
    path = run_dir(output_dir, arm, seed) / "summary.json"
    if not path.exists():
        return None
    summary = json.loads(path.read_text(encoding="utf-8"))
    timeline: List[Dict[str, float]] = summary["held_out_greedy_exact_by_time"]
    reached = next((point for point in timeline if point["greedy_exact"] >= threshold), None)
    held = [i for i in range(len(timeline)) if all(p["greedy_exact"] >= threshold for p in timeline[i:])]
    warm = summary.get("warm_start") or {}
    return {
        "arm": arm,
        "seed": seed,
        "steps": summary["steps"],
        "warm_start_s": warm.get("seconds", 0.0),
        "greedy_final": summary["held_out_exact_accuracy"]["greedy_exact"]["after"],
        "greedy_best": max(point["greedy_exact"] for point in timeline),
        "sampled_final": summary["held_out_exact_accuracy"]["sampled_exact"]["after"],
        "train_exact_first_step": (summary["train_exact_per_step"] or [0.0])[0],
        "reached": reached is not None,
        "train_s_to_threshold": None if reached is None else reached["train_s"],
        "wall_s_to_threshold": None if reached is None else reached["elapsed_s"],
        # From this evaluation on, every later one stayed at or above the threshold.
        "train_s_to_stay": timeline[held[0]]["train_s"] if held else None,
        "train_s_total": timeline[-1]["train_s"],
        "wall_s": summary["wall_s"],
        "failed_rollouts": summary["rollouts"]["failed"],
        "greedy_by_train_s": [(point["train_s"], point["greedy_exact"]) for point in timeline],
    }


def arm_summary(runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    times = [run["train_s_to_threshold"] for run in runs if run["reached"]]
    stays = [run["train_s_to_stay"] for run in runs if run["train_s_to_stay"] is not None]
    return {
        "runs": len(runs),
        "reached": len(times),
        "median_train_s_to_threshold": statistics.median(times) if times else None,
        "train_s_to_threshold": sorted(times),
        "stayed": len(stays),
        "median_train_s_to_stay": statistics.median(stays) if stays else None,
        "mean_greedy_final": statistics.fmean(run["greedy_final"] for run in runs) if runs else None,
        "mean_sampled_final": statistics.fmean(run["sampled_final"] for run in runs) if runs else None,
    }


def print_table(runs: List[Dict[str, Any]], arms: Dict[str, Dict[str, Any]], threshold: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Demo seeds: held-out greedy exact accuracy, threshold {threshold}")
    columns = ("arm", "seed", "steps", "warm start s", "step 1 train exact", "final", "sampled final")
    for column in (*columns, f">= {threshold} at (train s)"):
        table.add_column(column, justify="right")
    table.add_column("stays from (train s)", justify="right")
    table.add_column("train s / wall s", justify="right")
    for run in runs:
        at = "never" if not run["reached"] else f"{run['train_s_to_threshold']:.0f} ({run['wall_s_to_threshold']:.0f})"
        table.add_row(
            run["arm"],
            str(run["seed"]),
            str(run["steps"]),
            f"{run['warm_start_s']:.0f}",
            f"{run['train_exact_first_step']:.0%}",
            f"{run['greedy_final']:.2f}",
            f"{run['sampled_final']:.2f}",
            at,
            "never" if run["train_s_to_stay"] is None else f"{run['train_s_to_stay']:.0f}",
            f"{run['train_s_total']:.0f} / {run['wall_s']:.0f}",
        )
    console = Console()
    console.print(table)
    for arm, result in arms.items():
        median = result["median_train_s_to_threshold"]
        console.print(
            f"{arm}: {result['reached']}/{result['runs']} reached {threshold}"
            + ("" if median is None else f", median {median:.0f} training s")
            + f"; {result['stayed']} stayed there"
            + ("" if not result["stayed"] else f" from a median {result['median_train_s_to_stay']:.0f} s")
            + f", mean final greedy {result['mean_greedy_final']:.2f}, sampled {result['mean_sampled_final']:.2f}"
        )


def plot_runs(runs: List[Dict[str, Any]], path: Path, threshold: float, budget: float) -> None:
    """Held-out greedy accuracy against training seconds, one line per run, a colour per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"none": "tab:blue", "rft": "tab:orange"}
    figure, axes = plt.subplots(figsize=(7, 4))
    for run in runs:
        seconds, accuracy = zip(*run["greedy_by_train_s"], strict=True)
        label = f"{'GRPO alone' if run['arm'] == 'none' else 'RFT warm start, then GRPO'}"
        first = all(other["arm"] != run["arm"] for other in runs[: runs.index(run)])
        axes.plot(
            seconds, accuracy, marker=".", color=colours.get(run["arm"]), alpha=0.7, label=label if first else None
        )
    axes.axhline(threshold, color="grey", ls=":", lw=1)
    axes.axvline(budget, color="grey", ls="--", lw=1)
    axes.set_xlabel("training seconds (held-out evaluations left out)")
    axes.set_ylabel("held-out exact accuracy, greedy")
    axes.set_ylim(-0.05, 1.05)
    axes.set_title(f"Demo seeds: {len({r['seed'] for r in runs})} seeds per arm, {budget:.0f} s budget")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--arms", nargs="+", choices=["none", "rft"], default=["none", "rft"])
    parser.add_argument("--time-budget", type=float, default=300.0, help="training seconds per run (both arms)")
    parser.add_argument("--max-steps", type=int, default=30, help="GRPO steps at most (the budget ends runs first)")
    parser.add_argument("--threshold", type=float, default=0.9, help="held-out greedy exact accuracy to reach")
    parser.add_argument("--output-dir", type=Path, default=ROOT / "runs" / "seeds")
    parser.add_argument("--report", action="store_true", help="only tabulate the runs in --output-dir")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--plot", type=Path, help="also draw accuracy against training time to this PNG")
    parser.add_argument("demo_args", nargs="*", help="more demo flags, after --")
    args = parser.parse_args(argv)
    if not args.report:
        for seed in args.seeds:
            for arm in args.arms:
                run_one(args, arm, seed)
    runs = [
        r for seed in args.seeds for arm in args.arms if (r := read_run(args.output_dir, arm, seed, args.threshold))
    ]
    arms = {arm: arm_summary([r for r in runs if r["arm"] == arm]) for arm in args.arms}
    if args.plot is not None:
        plot_runs(runs, args.plot, args.threshold, args.time_budget)
    if args.json:
        print(json.dumps({"threshold": args.threshold, "arms": arms, "runs": runs}, indent=2))
    else:
        print_table(runs, arms, args.threshold)


if __name__ == "__main__":
    main()
