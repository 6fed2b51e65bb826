"""Held-out evaluation of a framework agent: what the framework examples' `train_*.py` scripts share.

Each example brings its agent, its held-out tasks, an offline stand-in model and how to describe a rollout.
`evaluate` runs the agent once per task through `Trainer.fit` with `Baseline` (real runner processes, an
in-memory store) against an OpenAI-compatible endpoint - the stand-in, served on loopback, when no
`--base-url` is given - then prints one line per rollout and the exact accuracy (reward 1).
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
from typing import Any, Callable, Dict, List, Optional, Sequence

import agentlightning as agl

ROOT = Path(__file__).resolve().parents[1]

Describe = Callable[[Any, Dict[str, Any], Optional[float]], str]
"""`(question, the agent's emitted object, reward) -> the rest of the rollout's line`."""


def eval_parser(doc: Optional[str], *, quick_tasks: int, limit: Optional[int]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick", action="store_true", help=f"{quick_tasks} held-out questions, scripted stand-in model"
    )
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default: the scripted model)")
    parser.add_argument("--model", default="smollm2", help="model name at --base-url")
    parser.add_argument("--limit", type=int, default=limit, help="held-out questions to evaluate")
    parser.add_argument("--n-runners", type=int, default=2)
    return parser


@contextmanager
def endpoint(base_url: Optional[str], scripted_model: Callable[[Dict[str, Any]], Any]) -> Iterator[str]:
    """`base_url`, or the loopback test server answering with `scripted_model`."""
    if base_url:
        yield base_url
        return
    sys.path.insert(0, str(ROOT))  # the repository root, for tests.support
    from tests.support.openai_server import OpenAITestServer

    with OpenAITestServer(scripted_model, always_return_token_ids=True) as server:
        yield server.base_url


def evaluate(
    agent: Any,
    tasks: Sequence[Any],
    args: argparse.Namespace,
    *,
    scripted_model: Callable[[Dict[str, Any]], Any],
    describe: Describe,
    max_tokens: int,
) -> List[float]:
    """Run `agent` on `tasks` (greedy, at most `max_tokens` per call), print the rollouts and the exact
    accuracy; returns each rollout's final reward (0 when it has none)."""
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    store = agl.InMemoryLightningStore(thread_safe=True)
    started = time.perf_counter()
    with endpoint(args.base_url, scripted_model) as base_url:
        llm = agl.LLM(
            endpoint=base_url,
            model=args.model,
            api_key=os.environ.get("OPENAI_API_KEY") or "EMPTY",
            sampling_parameters={"temperature": 0.0, "max_tokens": max_tokens},
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
        trainer.fit(agent, val_dataset=list(tasks))
        rewards = asyncio.run(_show(store, describe))
    exact = sum(r >= 1.0 for r in rewards) / max(1, len(tasks))
    print(f"val exact accuracy: {exact:.3f} over {len(tasks)} questions")
    print(f"({time.perf_counter() - started:.1f} s)")
    return rewards


async def _show(store: agl.LightningStore, describe: Describe) -> List[float]:
    rewards: List[float] = []
    for rollout in await store.query_rollouts(sort_by="start_time"):
        spans = await store.query_spans(rollout.rollout_id)
        details = next((agl.get_object_value(s) for s in spans if s.name == "agentlightning.object"), {}) or {}
        question = rollout.input["question"] if isinstance(rollout.input, dict) else rollout.input
        reward = agl.find_final_reward(spans)
        print(f"  [{rollout.mode}] {describe(question, details, reward)}")
        rewards.append(0.0 if reward is None else reward)
    return rewards
