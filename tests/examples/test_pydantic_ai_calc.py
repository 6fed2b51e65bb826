"""`examples/pydantic_ai_calc`: a PydanticAI agent trained as written; what it sends is what GRPO trains on."""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "pydantic_ai_calc"))
calc_agent = importlib.import_module("pydantic_calc_agent")

TASKS = [
    {"id": "t-right", "question": "What is 432 * 30?", "answer": 12960},
    {"id": "t-wrong", "question": "What is 197 times 57?", "answer": 11229},
]


@pytest.mark.slow
def test_quick_run_calls_the_calculator_and_answers_every_question() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "pydantic_ai_calc" / "train_pydantic_calc.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = re.findall(
        r"^  \[val\] (.+?) tool results \[([0-9.]+)\] reply='(\d+)' reward=1\.0$", completed.stdout, re.M
    )
    assert len(lines) == 4 and all(float(result) == float(reply) for _, result, reply in lines)
    assert "val exact accuracy: 1.000 over 4 questions" in completed.stdout


def choose(prompt: str) -> str:
    """The stand-in policy: a calculator call in the Hermes format, then the result (or a wrong number)."""
    last_turn = prompt.rsplit("<|im_start|>", 2)[-2]
    if last_turn.startswith("tool"):
        result = re.search(r"\d+", last_turn.split("\n", 1)[1])
        assert result is not None
        return result.group() if "12960" in last_turn else "11000"
    question = re.findall(r"What is (\d+) (?:\*|times) (\d+)\?", prompt)[-1]
    from tests.support.policy_capture import tool_call_text

    return tool_call_text("calculator", json.dumps({"expression": f"{question[0]} * {question[1]}"}))


@pytest.mark.train
def test_triplets_carry_the_exact_tokens_of_every_call_once_and_the_reward_of_their_rollout() -> None:
    from tests.support.policy_capture import assert_every_call_captured_once, capture

    right, wrong = asyncio.run(capture(calc_agent.pydantic_calculator_agent, TASKS, choose))
    assert right.reward == 1.0 and wrong.reward == 0.5  # the right tool call, a wrong reply: partial credit
    for captured in (right, wrong):
        assert len(captured.calls) == 2  # the tool call, then the answer
        assert_every_call_captured_once(captured)
    # The tool call went through the policy server's parser, and the tool result is in the next prompt.
    tokenizer = importlib.import_module("tests.support.tiny_model").tiny_tokenizer()
    second_prompt = tokenizer.decode(right.calls[1][0])
    assert '"name": "calculator"' in second_prompt and "<|im_start|>tool\n12960<|im_end|>" in second_prompt
    assert {t.metadata.get("response_id") for t in right.triplets}.isdisjoint(
        {t.metadata.get("response_id") for t in wrong.triplets}
    )
