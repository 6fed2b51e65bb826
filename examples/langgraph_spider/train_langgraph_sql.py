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

import sys
from pathlib import Path
from typing import Any, Dict, Optional

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "spider")]  # the agent, evaluate_agent, its stand-in
from evaluate_agent import eval_parser, evaluate  # noqa: E402
from sql_graph import langgraph_sql_agent  # noqa: E402
from sql_tasks import load_questions  # noqa: E402
from train_spider import scripted_model as spider_stand_in  # noqa: E402


def scripted_model(request: Dict[str, Any]) -> Any:
    """The offline stand-in of examples/spider: a wrong table name first, the reference query after the error."""
    return spider_stand_in(load_questions())(request)


def describe(question: Any, details: Dict[str, Any], reward: Optional[float]) -> str:
    queries = [q if q is None else q[:70] for q in details.get("queries", [])]
    return f"{question} -> {queries} reward={reward}"


def main() -> None:
    args = eval_parser(__doc__, quick_tasks=4, limit=16).parse_args()
    val = [q for q in load_questions() if q["split"] == "val"][: 4 if args.quick else args.limit]
    evaluate(langgraph_sql_agent, val, args, scripted_model=scripted_model, describe=describe, max_tokens=128)


if __name__ == "__main__":
    main()
