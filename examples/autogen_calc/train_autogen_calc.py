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

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent / "grpo_calculator")]  # evaluate_agent, the task
from autogen_calc_agent import autogen_calculator_agent  # noqa: E402
from calculator_agent import describe_rollout, load_tasks, stand_in_model  # noqa: E402  (make demo's task)
from evaluate_agent import eval_parser, evaluate  # noqa: E402


def main() -> None:
    args = eval_parser(__doc__, quick_tasks=4, limit=16).parse_args()
    val = load_tasks("val")[: 4 if args.quick else args.limit]
    evaluate(
        autogen_calculator_agent, val, args, scripted_model=stand_in_model, describe=describe_rollout, max_tokens=40
    )


if __name__ == "__main__":
    main()
