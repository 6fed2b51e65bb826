"""Evaluate the AutoGen calculator agent (`autogen_calc_agent.py`); its GRPO training is `benchmarks/examples_learning.py`.

Run (from the repository root):

    python examples/autogen_calc/train_autogen_calc.py --quick
        # offline smoke run in seconds: a scripted stand-in model calls the calculator tool with the
        # question's product, then answers with the tool's result; 4 held-out questions
    agl serve --model smollm2 --port 8000 &   # then:
    python examples/autogen_calc/train_autogen_calc.py --base-url http://127.0.0.1:8000/v1 --model smollm2
        # evaluate SmolLM2-135M-Instruct (greedy) on the held-out questions
    python benchmarks/examples_learning.py --framework autogen --seeds 0
        # train SmolLM2 with the RFT warm start and GRPO (the `train` extra), held-out accuracy before/after

What to expect: one line per rollout with the tool results, the reply and the reward, then
"val exact accuracy: X.XXX over N questions". Measured numbers are in this folder's README.
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
from typing import Any, Dict, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from autogen_calc_agent import autogen_calculator_agent  # noqa: E402  (it puts examples/grpo_calculator on the path)
from calculator_agent import load_tasks  # noqa: E402  (make demo's task data)

import agentlightning as agl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def scripted_model(request: Dict[str, Any]) -> Any:
    """The offline stand-in: call `calculator` with the last question's product, then answer with the result."""
    messages = request["messages"]
    last = messages[-1]
    if last.get("role") == "tool":
        return str(last.get("content"))
    question = next(str(m["content"]) for m in reversed(messages) if m.get("role") == "user")
    a, b = re.findall(r"\d+", question)[:2]
    return {"content": "", "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{a} * {b}"}}]}


@contextmanager
def endpoint(base_url: Optional[str]) -> Iterator[str]:
    if base_url:
        yield base_url
        return
    sys.path.insert(0, str(ROOT))  # the repository root, for tests.support
    from tests.support.openai_server import OpenAITestServer

    with OpenAITestServer(scripted_model, always_return_token_ids=True) as server:
        yield server.base_url


def print_rollouts(store: agl.LightningStore) -> None:
    async def show() -> None:
        for rollout in await store.query_rollouts(sort_by="start_time"):
            spans = await store.query_spans(rollout.rollout_id)
            details = next((agl.get_object_value(s) for s in spans if s.name == "agentlightning.object"), {}) or {}
            question = rollout.input["question"] if isinstance(rollout.input, dict) else rollout.input
            print(
                f"  [{rollout.mode}] {question} tool results {details.get('tool_results')} "
                f"reply={str(details.get('reply'))[:30]!r} reward={agl.find_final_reward(spans)}"
            )

    asyncio.run(show())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 held-out questions, scripted stand-in model")
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default: the scripted model)")
    parser.add_argument("--model", default="smollm2", help="model name at --base-url")
    parser.add_argument("--limit", type=int, default=16, help="held-out questions to evaluate")
    parser.add_argument("--n-runners", type=int, default=2)
    args = parser.parse_args()
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    val = load_tasks("val")[: 4 if args.quick else args.limit]
    store = agl.InMemoryLightningStore(thread_safe=True)
    started = time.perf_counter()
    with endpoint(args.base_url) as base_url:
        llm = agl.LLM(
            endpoint=base_url,
            model=args.model,
            api_key=os.environ.get("OPENAI_API_KEY") or "EMPTY",
            sampling_parameters={"temperature": 0.0, "max_tokens": 40},
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
        trainer.fit(autogen_calculator_agent, val_dataset=val)  # type: ignore[arg-type]
        print_rollouts(store)
        rewards = asyncio.run(_final_rewards(store))
        exact = sum(r >= 1.0 for r in rewards) / max(1, len(val))
        print(f"val exact accuracy: {exact:.3f} over {len(val)} questions")
    print(f"({time.perf_counter() - started:.1f} s)")


async def _final_rewards(store: agl.LightningStore) -> list[float]:
    rewards = []
    for rollout in await store.query_rollouts():
        reward = agl.find_final_reward(await store.query_spans(rollout.rollout_id))
        rewards.append(0.0 if reward is None else reward)
    return rewards


if __name__ == "__main__":
    main()
