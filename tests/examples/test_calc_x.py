"""`examples/calc_x`: the MCP calculator server as a real stdio process, the agent's tool loop, and GRPO."""

from __future__ import annotations

import asyncio
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "calc_x"))
calc_agent = importlib.import_module("calc_agent")
calculator_server = importlib.import_module("calculator_server")


def test_calculator_evaluates_arithmetic_and_refuses_anything_else() -> None:
    assert calculator_server.evaluate("(12 + 7) * 3") == 57
    assert calculator_server.format_number(calculator_server.evaluate("(1195 - 19) / 21")) == "56"
    assert calculator_server.evaluate("-2 ** 3 // 3") == -3
    for bad, message in [
        ("__import__('os')", "unsupported element"),
        ("1 / 0", "division by zero"),
        ("2 ** 1000", "exponent 1000 is too large"),
        ("1 +", "not an arithmetic expression"),
        ("1" * 300, "longer than 200"),
    ]:
        with pytest.raises(ValueError, match=message):
            calculator_server.evaluate(bad)


def test_every_problem_expression_gives_its_answer() -> None:
    for split in ("train", "val"):
        for problem in calc_agent.load_problems(split):
            assert calculator_server.evaluate(problem["expression"]) == problem["answer"], problem


def test_mcp_server_process_lists_and_runs_the_tool_over_stdio() -> None:
    async def talk() -> tuple[list[dict[str, object]], str, str, str]:
        async with calc_agent.calculator_session() as session:
            tools = await calc_agent.openai_tools(session)
            ok = await calc_agent.call_tool(session, "calculate", '{"expression": "17 * 23 + 4"}')
            bad = await calc_agent.call_tool(session, "calculate", '{"expression": "1 / 0"}')
            broken = await calc_agent.call_tool(session, "calculate", "not json")
            return tools, ok, bad, broken

    tools, ok, bad, broken = asyncio.run(talk())
    assert tools[0]["function"]["name"] == "calculate"  # type: ignore[index]
    assert tools[0]["function"]["parameters"]["required"] == ["expression"]  # type: ignore[index]
    assert ok == "395" and bad == "error: division by zero" and broken.startswith("error: the arguments")


def test_final_number_reads_the_last_number() -> None:
    assert calc_agent.final_number("17 * 23 = 391, plus 4: Answer: 395") == 395.0
    assert calc_agent.final_number("Answer: 1,250") == 1250.0
    assert calc_agent.final_number("no idea") is None


@pytest.mark.slow
def test_quick_run_calls_the_mcp_calculator_for_every_problem() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "calc_x" / "train_calc.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    calls = re.findall(
        r"^  \[val\] calculator calls \['(.+) -> (\d+)'\] reply='Answer: (\d+)' reward=1\.0$", completed.stdout, re.M
    )
    assert len(calls) == 4 and all(result == answer for _, result, answer in calls)
    assert "val accuracy: 1.000 over 4 problems" in completed.stdout


@pytest.mark.slow
@pytest.mark.train
def test_quick_grpo_trains_through_the_mcp_agent(tmp_path: Path) -> None:
    from tests.support.tiny_model import tiny_model

    train_calc = importlib.import_module("train_calc")
    model, tokenizer = tiny_model(seed=0)
    model.config.max_position_embeddings = 2048  # the system prompt and tool schema exceed the default 512
    args = train_calc.build_parser().parse_args(["--quick", "--algorithm", "grpo", "--n-runners", "1"])
    result = train_calc.run(args, model=model, tokenizer=tokenizer)
    assert result["val_before"] is not None and result["val_after"] is not None
