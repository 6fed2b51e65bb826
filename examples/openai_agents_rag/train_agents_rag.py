"""Evaluate the Agents SDK + MCP rag agent (`kestrel_agent.py`); its GRPO training is `benchmarks/examples_learning.py`.

Run (from the repository root):

    python examples/openai_agents_rag/train_agents_rag.py --quick
        # offline smoke run in seconds: a scripted stand-in model calls the MCP `search` tool with the
        # question, then answers with the reference answer when the passages it got back contain it
    agl serve --model smollm2 --port 8000 &   # then:
    python examples/openai_agents_rag/train_agents_rag.py --base-url http://127.0.0.1:8000/v1 --model smollm2
        # evaluate SmolLM2-135M-Instruct (greedy) on the held-out questions
    python benchmarks/examples_learning.py --framework openai_agents --seeds 0
        # train SmolLM2 with the RFT warm start and GRPO (the `train` extra), held-out F1 before/after

What to expect: one line per rollout with the searches, the answer and the reward (answer F1), then
"val exact accuracy: X.XXX over N questions" (F1 = 1) and the mean F1. Numbers are in this folder's README.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, Optional

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # the agent, evaluate_agent
from evaluate_agent import eval_parser, evaluate  # noqa: E402
from kestrel_agent import agents_sdk_rag_agent, load_questions  # noqa: E402


def scripted_model(request: Dict[str, Any]) -> Any:
    """The offline stand-in: search with the question; answer with the reference answer if the passages hold it."""
    messages = request["messages"]
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")  # after the worked turns
    question = str(messages[last_user]["content"])
    tool_results = [str(m.get("content")) for m in messages[last_user:] if m.get("role") == "tool"]
    if not tool_results:
        return {"content": "", "tool_calls": [{"name": "search", "arguments": {"query": question}}]}
    answers = {q["question"]: q["answer"] for q in load_questions("train") + load_questions("val")}
    answer = answers.get(question, "")
    return answer if answer and answer.lower() in tool_results[-1].lower() else "I do not know."


def describe(question: Any, details: Dict[str, Any], reward: Optional[float]) -> str:
    return f"{question} searches={details.get('searches')} answer={str(details.get('answer'))[:40]!r} F1={reward}"


def main() -> None:
    args = eval_parser(__doc__, quick_tasks=2, limit=None).parse_args()
    val = load_questions("val")[: 2 if args.quick else args.limit]
    f1 = evaluate(agents_sdk_rag_agent, val, args, scripted_model=scripted_model, describe=describe, max_tokens=64)
    print(f"mean F1 {sum(f1) / max(1, len(val)):.3f}")


if __name__ == "__main__":
    main()
