"""`examples/autogen_calc`: an AutoGen AgentChat agent trained as written; what it sends is what GRPO trains on.

AutoGen goes in beside the dev extra with `pip install --no-deps` (its protobuf pin; see the Makefile), so
these tests skip where it is not installed; `make venv` installs it.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REASON = "AutoGen is installed with --no-deps (make venv, or examples/autogen_calc/README.md)"
pytest.importorskip("autogen_agentchat", reason=REASON)
pytest.importorskip("autogen_ext.models.openai", reason=REASON)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "autogen_calc"))
calc_agent = importlib.import_module("autogen_calc_agent")

TASKS = [
    {"id": "t-right", "question": "What is 432 * 30?", "answer": 12960},
    {"id": "t-wrong", "question": "What is 197 times 57?", "answer": 11229},
]


@pytest.mark.slow
def test_quick_run_calls_the_calculator_and_answers_every_question() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "autogen_calc" / "train_autogen_calc.py"), "--quick"],
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

    right, wrong = asyncio.run(capture(calc_agent.autogen_calculator_agent, TASKS, choose))
    assert right.reward == 1.0 and wrong.reward == 0.5  # the right tool call, a wrong reply: partial credit
    for captured in (right, wrong):
        assert len(captured.calls) == 2  # the tool call, then the answer after the tool result
        assert_every_call_captured_once(captured)
    # AutoGen's tool call went through the policy server's parser (its schema rendered into the first
    # prompt), and AutoGen sent the tool result back in the next prompt.
    tokenizer = importlib.import_module("tests.support.tiny_model").tiny_tokenizer()
    first_prompt, second_prompt = (tokenizer.decode(ids) for ids, _ in right.calls)
    assert '"name": "calculator"' in first_prompt and "Evaluate arithmetic" in first_prompt
    assert "<|im_start|>tool\n12960<|im_end|>" in second_prompt
    assert second_prompt.startswith(first_prompt)  # the conversation grew by the tool call and its result
    assert {t.metadata.get("response_id") for t in right.triplets}.isdisjoint(
        {t.metadata.get("response_id") for t in wrong.triplets}
    )


def test_a_failed_tool_call_is_graded_as_an_attempt_and_no_tool_summary_counts_as_a_reply() -> None:
    from autogen_agentchat.messages import TextMessage, ToolCallExecutionEvent, ToolCallSummaryMessage
    from autogen_core.models import FunctionExecutionResult

    task = TASKS[0]
    error = FunctionExecutionResult(content="Error: bad", name="calculator", call_id="c", is_error=True)
    ok = FunctionExecutionResult(content="12960", name="calculator", call_id="c", is_error=False)
    question = TextMessage(content=task["question"], source="user")
    summary = ToolCallSummaryMessage(content="12960", source=calc_agent.AGENT_NAME, tool_calls=[], results=[ok])
    failed = calc_agent.episode_of([question, ToolCallExecutionEvent(content=[error], source=calc_agent.AGENT_NAME)])
    assert failed.tool_results == [None] and failed.final_text is None and calc_agent.grade(task, failed) == 0.15
    # The tool's own result echoed by AutoGen's summary is not the model's answer: partial credit only.
    summarized = calc_agent.episode_of(
        [question, ToolCallExecutionEvent(content=[ok], source=calc_agent.AGENT_NAME), summary]
    )
    assert summarized.final_text is None and calc_agent.grade(task, summarized) == 0.5
