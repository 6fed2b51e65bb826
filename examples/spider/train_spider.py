"""Evaluate or train the text-to-SQL agent (`sql_agent.py`) with Baseline, APO (the prompt) or GRPO (the weights).

Run (from the repository root):

    python examples/spider/train_spider.py --quick
        # offline smoke run in seconds: a scripted stand-in model first writes a query with a wrong table
        # name, sees the SQLite error in the check turn and rewrites it; 4 validation questions
    python examples/spider/train_spider.py --quick --algorithm apo
        # the same stand-in also plays APO's critic and editor: one round, to see the loop run
    agl serve --model smollm2 --port 8000 &   # then:
    python examples/spider/train_spider.py --base-url http://127.0.0.1:8000/v1 --model smollm2
        # evaluate SmolLM2-135M-Instruct on the 6 validation questions
    python examples/spider/train_spider.py --base-url http://127.0.0.1:8000/v1 --model smollm2 --algorithm apo
        # optimize the prompt with APO (critic and editor on the same endpoint; a stronger model helps)
    python examples/spider/train_spider.py --algorithm grpo --steps 4
        # train SmolLM2 with GRPO on the 18 training questions (the `train` extra), validating before/after

What to expect: one line per rollout with the queries written in each turn and the reward, then
"val execution match: X.XXX over N questions" (Baseline), "best prompt: ..." (APO), or "val execution
match before -> after" (GRPO). Measured numbers are in this folder's README.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sql_agent import SEED_PROMPT, SqlAgent, load_questions  # noqa: E402

import agentlightning as agl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def scripted_model(questions: List[Dict[str, Any]]):  # type: ignore[no-untyped-def]
    """The offline stand-in: a wrong table name first, the reference query after seeing the error."""
    reference = {q["question"]: q["sql"] for q in questions}

    def respond(request: Dict[str, Any]) -> str:
        messages = request["messages"]
        first = str(messages[0].get("content") or "")
        match = re.search(r"Question: (.+)", first)
        if match is None or match.group(1).strip() not in reference:
            return "The prompt is clear; keep it."  # APO's critic and editor calls
        gold = reference[match.group(1).strip()]
        answers = [str(m.get("content") or "") for m in messages if m.get("role") == "assistant"]
        if not answers:
            return "```sql\n" + re.sub(r"(?i)\bFROM (\w+)", r"FROM \1_table", gold, count=1) + "\n```"
        if "error:" in str(messages[-1].get("content")):
            return "```sql\n" + gold + "\n```"
        return answers[-1]

    return respond


@contextmanager
def endpoint(args: argparse.Namespace, questions: List[Dict[str, Any]]) -> Iterator[Optional[str]]:
    if args.base_url or args.algorithm == "grpo":
        yield args.base_url
        return
    sys.path.insert(0, str(ROOT))  # the repository root, for tests.support
    from tests.support.openai_server import OpenAITestServer

    with OpenAITestServer(scripted_model(questions), always_return_token_ids=True) as server:
        yield server.base_url


def print_rollouts(store: agl.LightningStore) -> None:
    async def show() -> None:
        for rollout in await store.query_rollouts(sort_by="start_time"):
            spans = await store.query_spans(rollout.rollout_id)
            details = next((agl.get_object_value(s) for s in spans if s.name == "agentlightning.object"), {}) or {}
            question = rollout.input["question"] if isinstance(rollout.input, dict) else rollout.input
            queries = [q if q is None else q[:70] for q in details.get("queries", [])]
            print(f"  [{rollout.mode}] {question} -> {queries} reward={agl.find_final_reward(spans)}")

    asyncio.run(show())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 validation questions, scripted model, threads")
    parser.add_argument("--algorithm", choices=("baseline", "apo", "grpo"), default="baseline")
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default: the scripted model)")
    parser.add_argument("--model", default="smollm2", help="model name at --base-url, or the GRPO model")
    parser.add_argument("--n-runners", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps")
    parser.add_argument("--max-rewrites", type=int, default=2, help="check/rewrite turns after the first query")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N validation questions")
    args = parser.parse_args()
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

    questions = load_questions()
    train = [q for q in questions if q["split"] == "train"][: 4 if args.quick else None]
    val = [q for q in questions if q["split"] == "val"][: 4 if args.quick else args.limit]
    agent = SqlAgent(max_rewrites=args.max_rewrites)
    store = agl.InMemoryLightningStore(thread_safe=True)
    strategy = (
        {"type": "shm", "n_runners": 1, "main_thread": "algorithm", "graceful_delay": 0.5} if args.quick else None
    )
    started = time.perf_counter()
    with endpoint(args, questions) as base_url:
        api_key = os.environ.get("OPENAI_API_KEY") or "EMPTY"
        llm = agl.LLM(
            endpoint=base_url or "",
            model=args.model,
            api_key=api_key,
            sampling_parameters={"temperature": 0.0, "max_tokens": 128},
        )
        if args.algorithm == "grpo":
            from agentlightning.algorithm.grpo import GRPO

            algorithm: agl.Algorithm = GRPO(
                model=args.model,
                total_steps=args.steps,
                batch_size=4,
                group_size=4,
                max_new_tokens=128,
                learning_rate=2e-5,
            )
            trainer = agl.Trainer(
                algorithm=algorithm, n_runners=args.n_runners, store=store, initial_resources={"prompt": SEED_PROMPT}
            )
            trainer.fit(agent, train_dataset=train, val_dataset=val)
            vals = [h["val_reward_mean"] for h in algorithm.history if "val_reward_mean" in h]  # type: ignore[attr-defined]
            if vals:
                print(f"val execution match before -> after: {vals[0]:.3f} -> {vals[-1]:.3f}")
        elif args.algorithm == "apo":
            from openai import AsyncOpenAI

            apo = agl.APO(
                AsyncOpenAI(base_url=base_url, api_key=api_key),
                gradient_model=args.model,
                apply_edit_model=args.model,
                beam_rounds=1 if args.quick else 2,
                beam_width=1 if args.quick else 2,
                branch_factor=1 if args.quick else 2,
                gradient_batch_size=2 if args.quick else 4,
                val_batch_size=len(val),
                show_progress=False,
            )
            trainer = agl.Trainer(
                algorithm=apo,
                strategy=strategy,
                n_runners=args.n_runners,
                store=store,
                adapter=agl.TraceToMessages(),
                initial_resources={"prompt": SEED_PROMPT, "main_llm": llm},
            )
            trainer.fit(agent, train_dataset=train, val_dataset=val)
            print_rollouts(store)
            print(f"best prompt: {apo.get_best_prompt().template!r}")
        else:
            trainer = agl.Trainer(
                algorithm=agl.Baseline(polling_interval=0.5),
                strategy=strategy,
                n_runners=args.n_runners,
                store=store,
                initial_resources={"prompt": SEED_PROMPT, "main_llm": llm},
                summary=False,
            )
            trainer.fit(agent, val_dataset=val)
            print_rollouts(store)
            summary = trainer.last_summary
            assert summary is not None
            score = summary.rewards[0].mean if summary.rewards else 0.0
            print(f"val execution match: {score:.3f} over {len(val)} questions")
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
