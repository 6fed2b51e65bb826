"""Evaluate or train the retrieval-augmented QA agent (`rag_agent.py`) on the Kestrel Isle questions.

Run (from the repository root):

    python examples/rag/train_rag.py --quick
        # offline smoke run in seconds: a scripted stand-in model (searches, then answers with the top
        # passage) evaluates 4 validation questions through the whole stack
    agl serve --model smollm2 --port 8000 &   # then:
    python examples/rag/train_rag.py --base-url http://127.0.0.1:8000/v1 --model smollm2
        # evaluate SmolLM2-135M-Instruct on the 6 validation questions (Baseline algorithm)
    python examples/rag/train_rag.py --algorithm grpo --steps 4
        # train SmolLM2 with GRPO on the 18 training questions (needs the `train` extra; the policy
        # server is started by GRPO itself), validating before and after
    python examples/rag/train_rag.py --base-url https://api.openai.com/v1 --model gpt-4.1-nano
        # any OpenAI-compatible endpoint (OPENAI_API_KEY)

What to expect: one line per validation question with the searches the model made and its F1, then
"val answer F1: X.XXX over N questions" (Baseline), or for GRPO one line per step with the train reward
and "val answer F1 before -> after". The quick mode's scripted model answers with the first sentence of
the best passage, so its F1 is below 1 (the reference answers are a few words). Measured numbers are in
this folder's README.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rag_agent import DATA, RagAgent, Retriever, load_jsonl  # noqa: E402

import agentlightning as agl  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def scripted_model(retriever: Retriever):  # type: ignore[no-untyped-def]
    """A stand-in model for the offline quick run: search with the question, then answer from the top hit."""

    def respond(request: Dict[str, Any]) -> Any:
        messages = request["messages"]
        tool_results = [m for m in messages if m.get("role") == "tool"]
        if not tool_results:
            question = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
            return {"content": "", "tool_calls": [{"name": "search", "arguments": {"query": question}}]}
        first_passage = str(tool_results[-1]["content"]).split("\n")[0]
        return first_passage.split("] ", 1)[-1].split(". ")[0]

    return respond


@contextmanager
def endpoint(args: argparse.Namespace, retriever: Retriever) -> Iterator[Optional[str]]:
    if args.base_url or args.algorithm == "grpo":
        yield args.base_url
        return
    sys.path.insert(0, str(ROOT))  # the repository root, for tests.support
    from tests.support.openai_server import OpenAITestServer

    with OpenAITestServer(scripted_model(retriever), always_return_token_ids=True) as server:
        yield server.base_url


def print_rollouts(trainer: agl.Trainer, store: agl.LightningStore) -> None:
    import asyncio

    async def show() -> None:
        for rollout in await store.query_rollouts(sort_by="start_time"):
            spans = await store.query_spans(rollout.rollout_id)
            reward = agl.find_final_reward(spans)
            details = next((agl.get_object_value(s) for s in spans if s.name == "agentlightning.object"), {}) or {}
            question = rollout.input["question"] if isinstance(rollout.input, dict) else rollout.input
            print(
                f"  [{rollout.mode}] {question} searches={details.get('searches')} answer={str(details.get('answer', ''))[:60]!r} F1={reward if reward is None else round(reward, 3)}"
            )

    asyncio.run(show())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 validation questions, scripted model, 1 runner")
    parser.add_argument("--algorithm", choices=("baseline", "grpo"), default="baseline")
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default: the scripted model)")
    parser.add_argument("--model", default="smollm2", help="model name at --base-url, or the GRPO model")
    parser.add_argument("--n-runners", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps")
    parser.add_argument("--store", default=None, help="SQLite file to keep the run in (default: in memory)")
    args = parser.parse_args()
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)

    questions = load_jsonl(DATA / "questions.jsonl")
    train = [q for q in questions if q["split"] == "train"]
    val = [q for q in questions if q["split"] == "val"][: 4 if args.quick else None]
    retriever = Retriever.from_corpus()
    store = agl.SqliteLightningStore(args.store) if args.store else agl.InMemoryLightningStore(thread_safe=True)
    started = time.perf_counter()
    with endpoint(args, retriever) as base_url:
        if args.algorithm == "baseline":
            llm = agl.LLM(endpoint=base_url or "", model=args.model, api_key=os.environ.get("OPENAI_API_KEY"))
            llm.sampling_parameters = {"temperature": 0.0, "max_tokens": 64}
            trainer = agl.Trainer(
                algorithm=agl.Baseline(polling_interval=0.5),
                # The quick run keeps everything in this process (threads): no runner process to start.
                strategy={"type": "shm", "n_runners": 1, "main_thread": "algorithm", "graceful_delay": 0.5}
                if args.quick
                else None,
                n_runners=args.n_runners,
                store=store,
                initial_resources={"main_llm": llm},
                summary=False,
            )
            trainer.fit(RagAgent(retriever), val_dataset=val)
            print_rollouts(trainer, store)
            summary = trainer.last_summary
            assert summary is not None
            f1 = summary.rewards[0].mean if summary.rewards else 0.0
            print(f"val answer F1: {f1:.3f} over {len(val)} questions ({time.perf_counter() - started:.1f} s)")
            return
        from agentlightning.algorithm.grpo import GRPO

        algorithm = GRPO(
            model=args.model,
            total_steps=args.steps,
            batch_size=4,
            group_size=4,
            max_new_tokens=64,
            learning_rate=2e-5,
        )
        trainer = agl.Trainer(algorithm=algorithm, n_runners=args.n_runners, store=store, summary=False)
        trainer.fit(RagAgent(retriever), train_dataset=train, val_dataset=val)
        vals = [h["val_reward_mean"] for h in algorithm.history if "val_reward_mean" in h]
        for record in algorithm.history:
            if "reward_mean" in record:
                print(f"  step {record.get('step')}: train reward {record['reward_mean']:.3f}")
        if vals:
            print(
                f"val answer F1 before -> after: {vals[0]:.3f} -> {vals[-1]:.3f} ({time.perf_counter() - started:.1f} s)"
            )


if __name__ == "__main__":
    main()
