"""Train the room selector's prompt with APO through `Trainer.fit`.

APO runs the agent (`room_selector.py`) on training tasks, asks a critic model what went wrong, lets an
editor model rewrite the prompt, keeps the best prompts on validation batches, and prints the best prompt
with its validation score at the end. Every candidate prompt is stored in the LightningStore as its own
resources version (`v0`, `v1`, ...) and the whole search is written to a JSON report.

Works with any OpenAI-compatible endpoint; the `openai` client reads `OPENAI_API_KEY` and
`OPENAI_BASE_URL` from the environment:

    export OPENAI_API_KEY=sk-...
    python examples/apo/room_selector_apo.py

    # a local vLLM / llama.cpp server serving one model for every role:
    export OPENAI_BASE_URL=http://localhost:8000/v1 OPENAI_API_KEY=EMPTY
    python examples/apo/room_selector_apo.py --agent-model my-model --gradient-model my-model \
        --apply-edit-model my-model

Model names also come from `APO_AGENT_MODEL`, `APO_GRADIENT_MODEL` and `APO_APPLY_EDIT_MODEL`. The 48
tasks of `room_tasks.jsonl` are split in half for training and validation (`--max-tasks` uses fewer).

What to expect (defaults: 2 rounds, beam width 2, 2 branches, 8 runners; roughly 10-20 minutes and a few
hundred model calls with gpt-4.1-nano as agent): a progress bar and a table of candidates per round, the
seed prompt's validation score first, and the best prompt with a higher score at the end (plus
`apo_report.json`). With a strong agent model the seed may already score high, leaving less to gain.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Optional

from openai import AsyncOpenAI
from room_selector import SEED_PROMPT, load_room_tasks, room_selector

import agentlightning as agl
from agentlightning.algorithm.apo import APO

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent-model", default=env("APO_AGENT_MODEL", "gpt-4.1-nano"))
    parser.add_argument("--gradient-model", default=env("APO_GRADIENT_MODEL", "gpt-5-mini"))
    parser.add_argument("--apply-edit-model", default=env("APO_APPLY_EDIT_MODEL", "gpt-4.1-mini"))
    parser.add_argument("--beam-rounds", type=int, default=2)
    parser.add_argument("--beam-width", type=int, default=2)
    parser.add_argument("--branch-factor", type=int, default=2)
    parser.add_argument("--gradient-batch-size", type=int, default=4)
    parser.add_argument("--val-batch-size", type=int, default=10)
    parser.add_argument("--max-tasks", type=int, default=None, help="use only the first N tasks (split in half)")
    parser.add_argument("--n-runners", type=int, default=8)
    parser.add_argument("--strategy", choices=["cs", "shm"], default="cs", help="client-server (default) or threads")
    parser.add_argument("--port", type=int, default=None, help="store port of the client-server strategy")
    parser.add_argument("--poll-interval", type=float, default=1.0, help="seconds a runner waits on an empty queue")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--report", default="apo_report.json", help="where to write the JSON report")
    return parser.parse_args(argv)


def prepare(args: argparse.Namespace) -> tuple[str, list[Any], list[Any], AsyncOpenAI]:
    """Check the environment, set up logging; the endpoint, the train/val halves of the tasks and a client."""
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        sys.exit("Set OPENAI_API_KEY (and OPENAI_BASE_URL for a server other than api.openai.com) first.")
    agl.setup_logging("INFO")
    logging.getLogger("httpx").setLevel(logging.WARNING)

    base_url = os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    tasks = load_room_tasks()
    if args.max_tasks is not None:
        tasks = tasks[: args.max_tasks]
    half = len(tasks) // 2
    client = AsyncOpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY") or "EMPTY")
    return base_url, tasks[:half], tasks[half:], client


def room_trainer(args: argparse.Namespace, algorithm: Any, base_url: str, store: Any = None) -> agl.Trainer:
    """A trainer for a prompt optimizer of the room selector: the seed prompt and the agent model as resources."""
    strategy: dict[str, Any] = {"type": args.strategy, "n_runners": args.n_runners}
    if args.strategy == "shm":
        strategy["main_thread"] = "algorithm"
    return agl.Trainer(
        algorithm=algorithm,
        n_runners=args.n_runners,
        strategy=strategy,
        port=args.port,
        store=store,
        runner={"poll_interval": args.poll_interval},
        adapter=agl.TraceToMessages(),
        initial_resources={
            "prompt": SEED_PROMPT,
            # The API key stays out of the store; the agent reads OPENAI_API_KEY itself.
            "llm": agl.LLM(endpoint=base_url, model=args.agent_model),
        },
    )


def main(argv: Optional[list[str]] = None) -> APO:
    args = parse_args(argv)
    base_url, train_tasks, val_tasks, client = prepare(args)
    algorithm = APO(
        client,
        gradient_model=args.gradient_model,
        apply_edit_model=args.apply_edit_model,
        beam_rounds=args.beam_rounds,
        beam_width=args.beam_width,
        branch_factor=args.branch_factor,
        gradient_batch_size=args.gradient_batch_size,
        val_batch_size=args.val_batch_size,
        seed=args.seed,
        report_path=args.report,
    )
    trainer = room_trainer(args, algorithm, base_url)
    trainer.fit(room_selector, train_tasks, val_dataset=val_tasks)  # type: ignore[arg-type]
    print(f"Report written to {args.report}")
    return algorithm


if __name__ == "__main__":
    main()
