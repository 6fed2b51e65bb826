"""Train the MCP calculator agent (`calc_agent.py`) with GRPO, or evaluate it with Baseline.

Run (from the repository root):

    python examples/calc_x/train_calc.py --quick
        # offline smoke run in seconds: a scripted stand-in model calls the MCP calculator with the
        # problem's expression and answers with the tool's result; 4 validation problems
    python examples/calc_x/train_calc.py --algorithm grpo --steps 6
        # GRPO on SmolLM2-135M-Instruct (the `train` extra; GRPO serves the policy itself), held-out
        # accuracy before and after
    agl serve --model smollm2 --port 8000 &   # then:
    python examples/calc_x/train_calc.py --base-url http://127.0.0.1:8000/v1 --model smollm2
        # evaluate a model behind any OpenAI-compatible endpoint that supports tool calls

What to expect: one line per rollout with the calculator calls (expression -> result) and the reward,
then "val accuracy: X.XXX over N problems" (Baseline) or "val accuracy before -> after" (GRPO). Every
calculator call crosses a process boundary: each rollout starts `calculator_server.py` and talks MCP to it
over stdio. Measured numbers are in this folder's README.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calc_agent import CalcAgent, load_problems  # noqa: E402

import agentlightning as agl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def scripted_model(problems: List[Dict[str, Any]]):  # type: ignore[no-untyped-def]
    """The offline stand-in: call `calculate` with the problem's expression, then answer with the result."""
    expressions = {p["question"]: p["expression"] for p in problems}

    def respond(request: Dict[str, Any]) -> Any:
        messages = request["messages"]
        question = next((str(m["content"]) for m in messages if m.get("role") == "user"), "")
        tool_results = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        if tool_results:
            return f"Answer: {tool_results[-1]}"
        expression = expressions.get(question, "1 + 1")
        return {"content": "", "tool_calls": [{"name": "calculate", "arguments": {"expression": expression}}]}

    return respond


@contextmanager
def endpoint(args: argparse.Namespace, problems: List[Dict[str, Any]]) -> Iterator[Optional[str]]:
    if args.base_url or args.algorithm == "grpo":
        yield args.base_url
        return
    sys.path.insert(0, str(ROOT))  # the repository root, for tests.support
    from tests.support.openai_server import OpenAITestServer

    with OpenAITestServer(scripted_model(problems), always_return_token_ids=True) as server:
        yield server.base_url


def print_rollouts(store: agl.LightningStore) -> None:
    async def show() -> None:
        for rollout in await store.query_rollouts(sort_by="start_time"):
            spans = await store.query_spans(rollout.rollout_id)
            details = next((agl.get_object_value(s) for s in spans if s.name == "agentlightning.object"), {}) or {}
            calls = [
                f"{json.loads(c['arguments'] or '{}').get('expression')} -> {c['output']}"
                for c in details.get("tool_calls", [])
            ]
            print(
                f"  [{rollout.mode}] calculator calls {calls} reply={str(details.get('reply', ''))[:40]!r} reward={agl.find_final_reward(spans)}"
            )

    asyncio.run(show())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: 4 validation problems (GRPO: 1 tiny step)")
    parser.add_argument("--algorithm", choices=("baseline", "grpo"), default="baseline")
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default: the scripted model)")
    parser.add_argument("--model", default="smollm2", help="model name at --base-url, or the GRPO model")
    parser.add_argument("--n-runners", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps")
    parser.add_argument("--batch-size", type=int, default=4, help="GRPO tasks per step")
    parser.add_argument("--group-size", type=int, default=4, help="GRPO rollouts per task")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N validation problems")
    return parser


def run(args: argparse.Namespace, model: Any = None, tokenizer: Any = None) -> Dict[str, Any]:
    """Run the example; `model`/`tokenizer` replace SmolLM2 for GRPO (the tests pass a tiny model)."""
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    train, val = load_problems("train"), load_problems("val")
    if args.quick:
        train, val = train[:4], val[: 2 if args.algorithm == "grpo" else 4]
    elif args.limit is not None:
        val = val[: args.limit]
    store = agl.InMemoryLightningStore(thread_safe=True)
    started = time.perf_counter()
    result: Dict[str, Any] = {}
    with endpoint(args, train + val) as base_url:
        if args.algorithm == "grpo":
            from agentlightning.algorithm.grpo import GRPO

            steps, batch, group = (1, 2, 2) if args.quick else (args.steps, args.batch_size, args.group_size)
            algorithm = GRPO(
                model=model if model is not None else args.model,
                tokenizer=tokenizer,
                total_steps=steps,
                batch_size=batch,
                group_size=group,
                max_new_tokens=16 if args.quick else 96,
                learning_rate=2e-5,
                temperature=1.0,
            )
            trainer = agl.Trainer(algorithm=algorithm, n_runners=args.n_runners, store=store, summary=False)
            trainer.fit(CalcAgent(), train_dataset=train, val_dataset=val)
            vals = [h["val_reward_mean"] for h in algorithm.history if "val_reward_mean" in h]
            result = {"val_before": vals[0] if vals else None, "val_after": vals[-1] if vals else None}
            for record in algorithm.history:
                if "reward_mean" in record:
                    print(f"  step {record.get('step')}: train reward {record['reward_mean']:.3f}")
            print(f"val accuracy before -> after: {result['val_before']} -> {result['val_after']}")
        else:
            llm = agl.LLM(
                endpoint=base_url or "",
                model=args.model,
                api_key=os.environ.get("OPENAI_API_KEY") or "EMPTY",
                sampling_parameters={"temperature": 0.0, "max_tokens": 96},
            )
            strategy = {"type": "shm", "n_runners": 1, "main_thread": "algorithm", "graceful_delay": 0.5}
            trainer = agl.Trainer(
                algorithm=agl.Baseline(polling_interval=0.5),
                strategy=strategy if args.quick else None,
                n_runners=args.n_runners,
                store=store,
                initial_resources={"main_llm": llm},
                summary=False,
            )
            trainer.fit(CalcAgent(), val_dataset=val)
            print_rollouts(store)
            summary = trainer.last_summary
            assert summary is not None
            result = {"val_accuracy": summary.rewards[0].mean if summary.rewards else 0.0}
            print(f"val accuracy: {result['val_accuracy']:.3f} over {len(val)} problems")
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(f"({result['seconds']} s)")
    return result


def main() -> None:
    run(build_parser().parse_args())


if __name__ == "__main__":
    main()
