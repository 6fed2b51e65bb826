"""Synchronous vs bounded-staleness async GRPO: rollouts/s and reward per wall-clock minute.

Runs the same short GRPO job twice through `Trainer.fit` (shared-memory strategy, runner threads, in-memory
store): once alternating generation and updates, once with `async_rollouts=True` (the next step's
rollouts generate on a served copy of the weights while the learner updates). The toy agent asks for a
short completion and is rewarded for vowels.

    python benchmarks/async_bench.py                       # tiny test model (fast, shows the mechanism)
    python benchmarks/async_bench.py --model smollm2 --steps 4 --json async.json

Numbers depend on the machine and its load (printed with the results); nothing here gates CI.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import agentlightning as agl  # noqa: E402
from agentlightning.algorithm.grpo import GRPO, GRPOConfig  # noqa: E402
from agentlightning.store.memory import InMemoryLightningStore  # noqa: E402
from agentlightning.types import LLM  # noqa: E402

TASKS = [{"question": f"Say something about the number {i}."} for i in range(16)]


@agl.rollout
async def vowel_agent(task: Dict[str, Any], llm: LLM) -> float:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=8)
    response = await client.chat.completions.create(
        model=llm.model, messages=[{"role": "user", "content": task["question"]}], **llm.sampling_parameters
    )
    text = response.choices[0].message.content or ""
    return sum(c in "aeiou" for c in text) / max(1, len(text))


def run(mode: str, args: argparse.Namespace) -> Dict[str, Any]:
    if args.model == "tiny":
        from tests.support.tiny_model import tiny_model

        model, tokenizer = tiny_model()
        spec: Dict[str, Any] = {"model": model, "tokenizer": tokenizer}
    else:
        spec = {"model": args.model}
    config = GRPOConfig(
        group_size=4,
        batch_size=args.batch_size,
        total_steps=args.steps,
        max_new_tokens=args.max_tokens,
        learning_rate=1e-3 if args.model == "tiny" else 1e-5,
        micro_batch_size=8,
        async_rollouts=mode == "async",
        device="cpu",
    )
    algorithm = GRPO(config, **spec)
    trainer = agl.Trainer(
        algorithm=algorithm,
        store=InMemoryLightningStore(),
        runner={"poll_interval": 0.02},
        strategy={"type": "shm", "n_runners": args.n_runners, "main_thread": "algorithm"},
    )
    started = time.perf_counter()
    trainer.fit(vowel_agent, train_dataset=TASKS)
    wall = time.perf_counter() - started
    history = [r for r in algorithm.history if "reward_mean" in r]
    rollouts = sum(r["rollouts"] - r["rollouts_failed"] for r in history)
    rewards = sum(r["reward_mean"] * (r["rollouts"] - r["rollouts_failed"]) for r in history)
    return {
        "mode": mode,
        "steps": len(history),
        "wall_s": wall,
        "rollouts_per_s": rollouts / wall,
        "reward_per_minute": rewards / (wall / 60),
        "mean_reward": rewards / max(1.0, rollouts),
        "drain_time_s_mean": (
            sum(r.get("drain_time_s", 0.0) for r in history) / len(history) if mode == "async" and history else 0.0
        ),
        "samples_stale_dropped": sum(r.get("samples_stale_dropped", 0.0) for r in history),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="'tiny' (the test model), 'smollm2', or a HF path")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=4, help="tasks per step (x 4 rollouts)")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--n-runners", type=int, default=4)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results = [run(mode, args) for mode in ("sync", "async")]
    load = os.getloadavg()
    print(f"model={args.model} steps={args.steps} rollouts/step={args.batch_size * 4} load={load[0]:.1f}")
    print(f"{'mode':<6} {'wall s':>8} {'rollouts/s':>11} {'reward/min':>11} {'drain s':>8} {'stale':>6}")
    for r in results:
        print(
            f"{r['mode']:<6} {r['wall_s']:>8.1f} {r['rollouts_per_s']:>11.2f} {r['reward_per_minute']:>11.1f} "
            f"{r['drain_time_s_mean']:>8.3f} {r['samples_stale_dropped']:>6.0f}"
        )
    print(f"async / sync rollouts/s: {results[1]['rollouts_per_s'] / results[0]['rollouts_per_s']:.2f}x")
    if args.json is not None:
        args.json.write_text(json.dumps({"load_average": list(load), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
