"""The summary of a `make demo` run: `summary.json`, the one-line result and the table printed at the end."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from pathlib import Path
from typing import Any, Dict, List, Sequence


def warm_start_summary(rft: Any) -> Dict[str, Any]:
    rounds = [r for r in rft.history if "selected_rollouts" in r]
    return {
        "method": "rft",
        "rounds": len(rounds),
        "rollouts": int(sum(r["rollouts"] for r in rounds)),
        "selected_rollouts": int(sum(r["selected_rollouts"] for r in rounds)),
        "train_exact_per_round": [round(r.get("exact_rate", 0.0), 4) for r in rounds],
        "seconds": round(sum(r["step_time_s"] for r in rounds), 1),
    }


def build_summary(
    args: argparse.Namespace,
    algorithm: Any,
    rft: Any,
    wall_s: float,
    store_path: Path,
    metrics_path: Path,
    resumed_from: Sequence[int] = (),
    interrupted: int = 0,
) -> Dict[str, Any]:
    """`rft`: the warm start (`DemoRFT`, or its `WarmStartRecord` when a resumed run did not redo it).

    `interrupted`: rollouts an interruption stopped (failed or cancelled, and redone by the resumed run): they
    are not counted as failed.
    """
    val: Dict[int, Dict[str, float]] = algorithm.val_results
    before = val.get(0, {}) if rft is None else rft.val_results.get(0, {})  # the untrained model either way
    after = val[max(val)] if val else {}  # after the last step (`--time-budget` may end the run before --steps)
    history: Sequence[Dict[str, Any]] = algorithm.history
    train = [r for r in history if "reward_mean" in r]
    updated = [r for r in train if not r.get("update_skipped")]
    held_out = {
        key: {"before": round(before.get(key, 0.0), 4), "after": round(after.get(key, 0.0), 4)}
        for key in ("greedy_exact", "sampled_exact", "greedy_reward", "sampled_reward")
    }
    evaluations: List[Dict[str, float]] = [*(rft.val_results.values() if rft is not None else []), *val.values()]
    statuses = asyncio.run(rollout_statuses(store_path))
    failed = max(0, statuses.get("failed", 0) + statuses.get("cancelled", 0) - interrupted)
    line = (
        f"demo: held-out greedy {held_out['greedy_exact']['before']:.2f} -> {held_out['greedy_exact']['after']:.2f}, "
        f"sampled {held_out['sampled_exact']['before']:.2f} -> {held_out['sampled_exact']['after']:.2f}, "
        f"{len(train)} steps, {failed} failed rollouts, {wall_s:.0f} s"
    )
    return {
        "line": line,
        "model": args.model,
        "held_out_exact_accuracy": held_out,
        "steps": len(train),
        "wall_s": round(wall_s, 1),
        "val_before": before,
        "val_after": after,
        "mode": "deterministic" if args.deterministic else ("async" if args.async_rollouts else "sync"),
        "rollouts": {"by_status": statuses, "failed": failed, "interrupted": interrupted},
        "resumed_from_steps": list(resumed_from),
        "curve": _curve(history),
        "train_reward_per_step": [round(r["reward_mean"], 4) for r in train],
        "train_exact_per_step": [round(r.get("exact_rate", 0.0), 4) for r in train],
        "rows": _rows(args, train),
        "memory_gb": _memory(train),
        "timings_s": {
            "total_wall": round(wall_s, 1),
            "mean_step": round(statistics.fmean(r["step_time_s"] for r in train), 1) if train else 0.0,
            "mean_train_update": round(statistics.fmean(r["train_time_s"] for r in updated), 1) if updated else 0.0,
            "updates_skipped": len(train) - len(updated),
            "val_before": round(before.get("time_s", 0.0), 1),
            "val_after": round(after.get("time_s", 0.0), 1),
        },
        "settings": {
            key: (str(value) if isinstance(value, Path) else value)
            for key, value in vars(args).items()
            if key not in ("quick",)
        }
        | {"quick": bool(args.quick), "cpu_count": os.cpu_count(), "load_average": list(os.getloadavg())},
        "outputs": {"store": str(store_path), "metrics": str(metrics_path)},
        "warm_start": None if rft is None else {**warm_start_summary(rft), "val_after": val.get(0, {})},
        "held_out_greedy_exact_by_time": [
            {
                "elapsed_s": round(result["elapsed_s"], 1),
                "train_s": round(result["train_s"], 1),
                "greedy_exact": round(result["greedy_exact"], 4),
            }
            for result in sorted(evaluations, key=lambda r: r["elapsed_s"])
        ],
    }


def _rows(args: argparse.Namespace, train: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """How the rollouts became training rows: LLM calls and rows per rollout, tokens, merge breaks."""
    rollouts = sum(r.get("rollouts", 0.0) - r.get("rollouts_failed", 0.0) for r in train)

    def per_rollout(key: str) -> float:
        return round(sum(r.get(key, 0.0) for r in train) / max(1.0, rollouts), 3)

    def mean(key: str) -> float:
        return round(statistics.fmean(r.get(key, 0.0) for r in train), 1) if train else 0.0

    return {
        "aggregation": args.aggregation,
        "llm_calls_per_rollout": per_rollout("transitions"),
        "rows_per_rollout": per_rollout("rows"),
        "trained_tokens_per_rollout": mean("trained_tokens_per_rollout"),
        "row_tokens_per_rollout": mean("row_tokens_per_rollout"),
        "breaks": {
            cause: int(sum(r.get(f"breaks_{cause}", 0.0) for r in train))
            for cause in ("chat_template", "retokenization", "other")
        },
    }


def _memory(train: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The training process's resident memory after each GRPO step, and its peak (`demo_algorithms.memory_gb`)."""
    return {
        "rss_per_step": [round(r["rss_gb"], 2) for r in train if "rss_gb" in r],
        "peak": round(max((r.get("rss_peak_gb", 0.0) for r in train), default=0.0), 2),
    }


async def rollout_statuses(store_path: Path) -> Dict[str, int]:
    """Rollouts in the store by status (a failed one is a lost sample: the demo expects none)."""
    from agentlightning.store.sqlite import SqliteLightningStore

    store = SqliteLightningStore(store_path)
    try:
        counts: Dict[str, int] = {}
        for rollout in await store.query_rollouts():
            counts[str(rollout.status)] = counts.get(str(rollout.status), 0) + 1
        return counts
    finally:
        await store.close()


def _curve(history: Sequence[Dict[str, Any]]) -> list[Dict[str, Any]]:
    """Per step (0: before training): train reward and exact rate, and the held-out results when evaluated."""
    keys = {
        "train_reward": "reward_mean",
        "train_exact": "exact_rate",
        "held_out_greedy_exact": "val_exact_accuracy",
        "held_out_sampled_exact": "val_sampled_exact_accuracy",
    }
    return [
        {"step": record["step"], **{name: round(record[key], 4) for name, key in keys.items() if key in record}}
        for record in history
    ]


def print_summary(summary: Dict[str, Any], output_dir: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Held-out tasks (exact answers; greedy = temperature 0, sampled = training temperature)")
    table.add_column("")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_column("change", justify="right")
    for key, name in (
        ("greedy_exact", "exact, greedy"),
        ("sampled_exact", "exact, sampled"),
        ("greedy_reward", "shaped reward, greedy"),
        ("sampled_reward", "shaped reward, sampled"),
    ):
        b, a = summary["held_out_exact_accuracy"][key]["before"], summary["held_out_exact_accuracy"][key]["after"]
        table.add_row(name, f"{b:.3f}", f"{a:.3f}", f"{a - b:+.3f}")
    console = Console()
    console.print(table)
    rows = summary["rows"]
    console.print(
        f"Rows ({rows['aggregation']}): {rows['llm_calls_per_rollout']:.2f} LLM calls -> {rows['rows_per_rollout']:.2f} "
        f"rows per rollout, {rows['trained_tokens_per_rollout']:.0f} trained tokens per rollout, breaks {rows['breaks']}"
    )
    console.print(f"Total time {summary['timings_s']['total_wall'] / 60:.1f} min. Outputs in {output_dir}/:")
    saved = ", model/" if summary["settings"].get("save_model") else ""
    console.print(f"  metrics.jsonl, reward_curve.png, summary.json, store.db{saved}")
    console.print(f"Inspect the rollouts: agl store --backend sqlite --path {output_dir}/store.db")
