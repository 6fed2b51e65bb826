"""Transition vs trajectory rows on recorded rollouts: rows, tokens the learner processes, breaks by cause.

Reads the train rollouts of a store (default: the `make demo` SQLite store) and builds the GRPO training
rows both ways from the same triplets. No model is loaded: this counts what a training step would process.

    python benchmarks/trajectory_rows.py                              # runs/demo/store.db
    python benchmarks/trajectory_rows.py --store path/to/store.db --json rows.json

Columns, per rollout (mean): LLM calls, rows, row tokens (prompt + response of every row: what the forward
and backward passes cover), trained tokens (loss mask 1), and continuity breaks by cause (trajectory only;
the cause is guessed from token positions, as no tokenizer is loaded).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any, Dict, List

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.algorithm.grpo.batch import RolloutTriplets, samples_from_rollouts
from agentlightning.store.sqlite import SqliteLightningStore


async def load_rollouts(store_path: Path, mode: str) -> List[RolloutTriplets]:
    store = SqliteLightningStore(store_path)
    try:
        result: List[RolloutTriplets] = []
        for rollout in await store.query_rollouts(status_in=["succeeded"]):
            if rollout.mode != mode:
                continue
            spans = list(await store.query_spans(rollout.rollout_id, "latest"))
            triplets = TracerTraceToTriplet().adapt(spans)
            group = (rollout.metadata or {}).get("grpo_step"), (rollout.metadata or {}).get("grpo_group")
            result.append(RolloutTriplets(rollout.rollout_id, group, list(triplets), final_reward=0.0))
        return result
    finally:
        await store.close()


def measure(rollouts: List[RolloutTriplets]) -> Dict[str, Dict[str, Any]]:
    results: Dict[str, Dict[str, Any]] = {}
    for aggregation in ("transition", "trajectory"):
        stats: Dict[str, int] = {}
        samples = samples_from_rollouts(rollouts, aggregation=aggregation, stats=stats)  # type: ignore[arg-type]
        count = max(1, len(rollouts))
        results[aggregation] = {
            "rollouts": len(rollouts),
            "llm_calls_per_rollout": (stats["triplets"] - stats["skipped_triplets"]) / count,
            "rows_per_rollout": len(samples) / count,
            "row_tokens_per_rollout": sum(len(s.prompt_ids) + len(s.response_ids) for s in samples) / count,
            "trained_tokens_per_rollout": sum(s.trained_tokens for s in samples) / count,
            "max_row_tokens": max((len(s.prompt_ids) + len(s.response_ids) for s in samples), default=0),
            "breaks": {k.removeprefix("breaks_"): v for k, v in stats.items() if k.startswith("breaks_")},
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, default=Path("runs/demo/store.db"), help="SQLite store to read")
    parser.add_argument("--mode", default="train", help="rollout mode to read (train or val)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    if not args.store.exists():
        raise SystemExit(f"{args.store} not found; run `make demo` first or pass --store")
    rollouts = asyncio.run(load_rollouts(args.store, args.mode))
    results = measure(rollouts)
    header = f"{'aggregation':<12} {'rollouts':>8} {'calls/ro':>9} {'rows/ro':>8} {'row tok/ro':>11} {'trained/ro':>11}"
    print(header)
    print("-" * len(header))
    for name, row in results.items():
        print(
            f"{name:<12} {row['rollouts']:>8} {row['llm_calls_per_rollout']:>9.2f} {row['rows_per_rollout']:>8.2f} "
            f"{row['row_tokens_per_rollout']:>11.1f} {row['trained_tokens_per_rollout']:>11.1f}"
        )
    transition, trajectory = results["transition"], results["trajectory"]
    saved = 1 - trajectory["row_tokens_per_rollout"] / max(1e-9, transition["row_tokens_per_rollout"])
    print(f"trajectory breaks by cause: {trajectory['breaks']}; row tokens saved: {saved:.0%}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
