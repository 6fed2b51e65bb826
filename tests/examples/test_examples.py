"""The runnable examples run offline (against the loopback OpenAI server) and print what they promise."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_example(relative_path: str, *args: str) -> str:
    completed = subprocess.run(
        [sys.executable, str(ROOT / relative_path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, f"{relative_path} failed:\n{completed.stdout}\n{completed.stderr}"
    return completed.stdout


@pytest.mark.slow
def test_write_traces_prints_the_rollout_and_its_spans_in_order() -> None:
    out = run_example("examples/minimal/write_traces.py")
    assert re.search(r"AttemptedRollout\(rollout_id='ro-[0-9a-f]{12}'.*status='succeeded'", out)
    assert "7 spans:" in out
    names = re.findall(r"^  #(\d+) (\S+) ", out, flags=re.MULTILINE)
    assert names == [
        ("1", "lookup"),
        ("2", "plan"),
        ("3", "agentlightning.message"),
        ("4", "agentlightning.object"),
        ("5", "agentlightning.operation"),
        ("6", "openai.chat.completion"),
        ("7", "agentlightning.annotation"),
    ]
    llm_line = next(line for line in out.splitlines() if "openai.chat.completion" in line)
    assert "'gen_ai.prompt.0.content': 'Is Paris the capital of France?'" in llm_line
    assert "'prompt_token_ids': [" in llm_line and "'response_token_ids': [" in llm_line
    assert "'agentlightning.reward.0.value': 0.9" in out


@pytest.mark.slow
def test_apo_debug_runner_mode_prints_rollout_then_llm_and_reward_spans() -> None:
    out = run_example("examples/apo/apo_debug.py", "--mode", "runner")
    assert re.search(r"^\[AttemptedRollout\(rollout_id='ro-[0-9a-f]{12}'.*status='succeeded'", out, re.MULTILINE)
    spans = re.findall(
        r"Span\(rollout_id='(ro-\w+)', attempt_id='(at-\w+)', sequence_id=(\d+), \.\.\., name='([^']+)'", out
    )
    assert [(seq, name) for _, _, seq, name in spans] == [
        ("1", "openai.chat.completion"),
        ("2", "agentlightning.annotation"),
    ]
    assert "'gen_ai.completion.0.content': 'Lyra'" in out
    assert "'agentlightning.reward.0.value': 1.0" in out


@pytest.mark.slow
def test_apo_debug_hook_mode_prints_the_trace_from_the_hook() -> None:
    out = run_example("examples/apo/apo_debug.py", "--mode", "hook")
    lines = out.splitlines()
    assert lines[0] == "Trace spans collected during the rollout:"
    assert lines[1].startswith("- openai.chat.completion (status: ")
    assert "'gen_ai.prompt.0.role': 'user'" in lines[2]
    assert re.search(r"Rollout ro-[0-9a-f]{12} finished with status 'succeeded'\.", out)


def test_apo_debug_rejects_unknown_modes() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples/apo/apo_debug.py"), "--mode", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 2
    assert "invalid choice: 'nope'" in completed.stderr
