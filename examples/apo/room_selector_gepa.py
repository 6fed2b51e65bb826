"""Train the room selector's prompt with GEPA (reflective, Pareto-based search; the `gepa` extra).

GEPA runs the agent (`room_selector.py`) on small training minibatches, shows a reflection model the
conversations, tool calls and rewards of those rollouts (read back from the store), lets it rewrite the
prompt, and keeps every rewrite that does better, with its score on each validation task: a rewrite that
is best on some task stays on the Pareto front and can be improved further. It stops when a budget runs
out (rollouts, reflection tokens or dollars) and prints the best prompt. The best prompt and the front are
published as resources `gepa-best` and `gepa-frontier` (open the dashboard's Resources page on a SQLite
store to watch them), and the search state as `gepa-state`: run the same command again after a crash and
it continues where it stopped.

Works with any OpenAI-compatible endpoint; the `openai` client reads `OPENAI_API_KEY` and `OPENAI_BASE_URL`:

    export OPENAI_API_KEY=sk-...
    python examples/apo/room_selector_gepa.py --max-rollouts 300 --store runs/gepa.db

    # a local vLLM / llama.cpp server serving one model for both roles:
    export OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_API_KEY=EMPTY
    python examples/apo/room_selector_gepa.py --agent-model my-model --reflection-model my-model

What to expect with the defaults (gpt-4.1-nano agent, gpt-5-mini reflection, 24 training and 24
validation tasks, 300 rollouts): a line per iteration (proposal accepted or rejected, candidates so far),
then the best prompt with its mean validation score; a few hundred agent calls and a few dozen
reflection calls. See docs/hosted-prompt-optimization.md for prices and budgets.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Optional

from room_selector import room_selector
from room_selector_apo import prepare, room_trainer

import agentlightning as agl


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent-model", default=env("GEPA_AGENT_MODEL", "gpt-4.1-nano"))
    parser.add_argument("--reflection-model", default=env("GEPA_REFLECTION_MODEL", "gpt-5-mini"))
    parser.add_argument("--max-rollouts", type=int, default=300, help="budget: agent rollouts")
    parser.add_argument("--max-reflection-dollars", type=float, default=None, help="budget: reflection spend")
    parser.add_argument("--input-price", type=float, default=None, help="reflection $ per million input tokens")
    parser.add_argument("--output-price", type=float, default=None, help="reflection $ per million output tokens")
    parser.add_argument("--minibatch-size", type=int, default=3, help="training tasks per reflection")
    parser.add_argument("--max-tasks", type=int, default=None, help="use only the first N tasks (split in half)")
    parser.add_argument("--n-runners", type=int, default=8)
    parser.add_argument("--strategy", choices=["cs", "shm"], default="cs", help="client-server (default) or threads")
    parser.add_argument("--port", type=int, default=None, help="store port of the client-server strategy")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds a runner waits on an empty queue")
    parser.add_argument("--store", default=None, help="SQLite file for the store (resumable, browsable)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> Any:
    args = parse_args(argv)
    base_url, train_tasks, val_tasks, client = prepare(args)
    algorithm = agl.GEPA(
        client,
        reflection_model=args.reflection_model,
        max_rollouts=args.max_rollouts,
        max_reflection_dollars=args.max_reflection_dollars,
        price_per_million_input_tokens=args.input_price,
        price_per_million_output_tokens=args.output_price,
        minibatch_size=args.minibatch_size,
        seed=args.seed,
    )
    store = agl.SqliteLightningStore(args.store) if args.store else None
    trainer = room_trainer(args, algorithm, base_url, store=store)
    trainer.fit(room_selector, train_tasks, val_dataset=val_tasks)  # type: ignore[arg-type]
    result = algorithm.result
    usage = algorithm.reflection_usage
    print(
        f"GEPA stopped ({algorithm.stop_reason}): {len(result.candidates)} candidates, best c{result.best_idx} with "
        f"mean validation score {result.val_aggregate_scores[result.best_idx]:.3f} (seed "
        f"{result.val_aggregate_scores[0]:.3f}); reflection: {usage.calls} calls, {usage.tokens} tokens, "
        f"${usage.dollars:.4f}"
    )
    print(f"GEPA best prompt:\n{algorithm.get_best_prompt().template}")
    return algorithm


if __name__ == "__main__":
    main()
