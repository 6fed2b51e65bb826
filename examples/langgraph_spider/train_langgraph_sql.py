"""Evaluate the LangGraph SQL agent (`sql_graph.py`); its GRPO training is `benchmarks/examples_learning.py`.

Run (from the repository root):

    python examples/langgraph_spider/train_langgraph_sql.py --quick
        # offline smoke run in seconds: a scripted stand-in model first writes a query with a wrong table
        # name, the graph's check node shows it the SQLite error, and it rewrites it; 4 held-out questions
    agl serve --model smollm2 --port 8000 &   # then:
    python examples/langgraph_spider/train_langgraph_sql.py --base-url http://127.0.0.1:8000/v1 --model smollm2
        # evaluate SmolLM2-135M-Instruct (greedy) on the 16 held-out questions
    python benchmarks/examples_learning.py --framework langgraph --seeds 0
        # train SmolLM2 with the RFT warm start and GRPO (the `train` extra), held-out accuracy before/after

What to expect: one line per rollout with the queries of each turn and the reward, then
"val exact accuracy: X.XXX over N questions" (execution match). Measured numbers are in this folder's README.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spider"))  # its stand-in model
from sql_graph import langgraph_sql_agent  # noqa: E402
from sql_tasks import load_questions  # noqa: E402
from train_spider import scripted_model as spider_stand_in  # noqa: E402

import agentlightning as agl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def scripted_model(request: Dict[str, Any]) -> Any:
    """The offline stand-in of examples/spider: a wrong table name first, the reference query after the error."""
    return spider_stand_in(load_questions())(request)


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
            queries = [q if q is None else q[:70] for q in details.get("queries", [])]
            print(f"  [{rollout.mode}] {question} -> {queries} reward={agl.find_final_reward(spans)}")

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
    val = [q for q in load_questions() if q["split"] == "val"][: 4 if args.quick else args.limit]
    store = agl.InMemoryLightningStore(thread_safe=True)
    started = time.perf_counter()
    with endpoint(args.base_url) as base_url:
        llm = agl.LLM(
            endpoint=base_url,
            model=args.model,
            api_key=os.environ.get("OPENAI_API_KEY") or "EMPTY",
            sampling_parameters={"temperature": 0.0, "max_tokens": 128},
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
        trainer.fit(langgraph_sql_agent, val_dataset=val)  # type: ignore[arg-type]
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
