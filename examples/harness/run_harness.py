"""Run the harnessed agents of this folder through `Trainer` and print their triplets.

The agents (`python_agent.py`, `node_agent.mjs`) never import agentlightning: `ProcessAgent` starts one
process per rollout with a rollout-scoped model URL, an events URL and a key; the gateway it starts
records every LLM call (with token ids) and every posted reward as spans in a SQLite store, and
`TracerTraceToTriplet` turns them into triplets.

    # against the loopback test model server (answers the sums; no GPU, no network):
    python examples/harness/run_harness.py --agent python --test-server
    python examples/harness/run_harness.py --agent node --test-server --fit
    # against any OpenAI-compatible server that returns token ids (e.g. `agl vllm serve ...`):
    python examples/harness/run_harness.py --agent python --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-0.6B

Options: `--store PATH` (SQLite file, default harness.db in a temp dir), `--fit` (Trainer.fit instead of
Trainer.dev; both run the Baseline algorithm here).

What to expect: one line per rollout, `ro-... succeeded reward=1.0 triplets=2` (1 triplet for the Node
agent), followed by the first triplet's prompt/response token ids.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import agentlightning as agl
from agentlightning.store.sqlite import SqliteLightningStore

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

TASKS: list[dict[str, Any]] = [
    {"question": "What is 2 + 3?", "answer": "5"},
    {"question": "What is 12 + 30?", "answer": "42"},
]
VAL_TASKS: list[dict[str, Any]] = [{"question": "What is 7 + 8?", "answer": "15"}]

_SUM = re.compile(r"(\d+)\s*\+\s*(\d+)")


def answer_sums(request: dict[str, Any]) -> str:
    """Test-server responder: the sum asked in the first user message."""
    for message in request.get("messages") or []:
        if message.get("role") == "user":
            match = _SUM.search(str(message.get("content")))
            if match:
                return str(int(match.group(1)) + int(match.group(2)))
    return "I do not know."


def make_agent(kind: str) -> agl.ProcessAgent:
    """The ProcessAgent running `python_agent.py` or `node_agent.mjs`."""
    env_map = {"QUESTION": "question", "ANSWER": "answer"}
    if kind == "python":
        command = [sys.executable, str(HERE / "python_agent.py")]
    elif kind == "node":
        node = shutil.which("node")
        if node is None:
            raise SystemExit("the Node.js agent needs `node` (>= 18) on PATH")
        command = [node, str(HERE / "node_agent.mjs")]
    else:
        raise ValueError(f"agent must be 'python' or 'node', got {kind!r}")
    return agl.ProcessAgent(command, env_map=env_map, timeout_seconds=120)


def make_trainer(store: agl.LightningStore, base_url: str, model: str) -> agl.Trainer:
    """A trainer running the Baseline algorithm and 3 runners in one process; the model is resource `llm`."""
    return agl.Trainer(
        algorithm=agl.Baseline(polling_interval=0.1, span_verbosity="none"),
        store=store,
        strategy={"type": "shm", "main_thread": "algorithm", "n_runners": 3},
        runner={"poll_interval": 0.05, "heartbeat_interval": 60.0},
        initial_resources={"llm": agl.LLM(endpoint=base_url, model=model)},
    )


async def summarize(store: agl.LightningStore) -> list[dict[str, Any]]:
    """Per rollout: status, final reward and triplets (from the stored spans)."""
    adapter = agl.TracerTraceToTriplet()
    summary: list[dict[str, Any]] = []
    for rollout in await store.query_rollouts(sort_by="start_time"):
        spans = list(await store.query_spans(rollout.rollout_id, "latest"))
        summary.append(
            {
                "rollout_id": rollout.rollout_id,
                "input": rollout.input,
                "mode": rollout.mode,
                "status": rollout.status,
                "reward": agl.find_final_reward(spans),
                "spans": spans,
                "triplets": adapter.adapt(spans),
            }
        )
    return summary


def run(agent_kind: str, store_path: str, base_url: str, model: str, fit: bool) -> list[dict[str, Any]]:
    store = SqliteLightningStore(store_path)
    trainer = make_trainer(store, base_url, model)
    agent = make_agent(agent_kind)
    if fit:
        trainer.fit(agent, TASKS, val_dataset=VAL_TASKS)
    else:
        trainer.dev(agent, TASKS, val_dataset=VAL_TASKS)
    asyncio.run(agent.close())
    reader = SqliteLightningStore(store_path)
    try:
        return asyncio.run(summarize(reader))
    finally:
        asyncio.run(reader.close())


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent", choices=["python", "node"], default="python")
    parser.add_argument("--base-url", help="OpenAI-compatible base URL of the model server")
    parser.add_argument("--model", default="test-model")
    parser.add_argument("--test-server", action="store_true", help="serve the model with the loopback test server")
    parser.add_argument("--store", help="SQLite file (default: harness.db in a temporary directory)")
    parser.add_argument("--fit", action="store_true", help="use Trainer.fit instead of Trainer.dev")
    args = parser.parse_args(argv)
    store_path = args.store or os.path.join(tempfile.mkdtemp(prefix="agl-harness-"), "harness.db")
    if args.test_server:
        sys.path.insert(0, str(ROOT))
        from tests.support.openai_server import OpenAITestServer

        with OpenAITestServer(answer_sums, model=args.model) as server:
            summary = run(args.agent, store_path, server.base_url, args.model, args.fit)
    elif args.base_url:
        summary = run(args.agent, store_path, args.base_url, args.model, args.fit)
    else:
        parser.error("pass --test-server or --base-url")
    for item in summary:
        print(f"{item['rollout_id']} {item['status']} reward={item['reward']} triplets={len(item['triplets'])}")
    if summary and summary[0]["triplets"]:
        first = summary[0]["triplets"][0]
        print("first triplet prompt ids:", first.prompt["token_ids"])
        print("first triplet response ids:", first.response["token_ids"])
    print(f"store: {store_path}")
    return 0 if summary and all(item["status"] == "succeeded" for item in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
