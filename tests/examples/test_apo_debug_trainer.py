"""`apo_debug.py --mode trainer`: Trainer.dev + Baseline, offline against the loopback OpenAI server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_trainer_mode_logs_each_rollout_as_the_baseline_sees_it() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGL_")}
    env["PYTHONPATH"] = str(ROOT)
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "apo" / "apo_debug.py"), "--mode", "trainer"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=ROOT,
    )
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0, log
    assert "Initial resources set: {'main_prompt': PromptTemplate(" in log
    assert log.count("Enqueued rollout ") == 2
    assert log.count("Finished with status succeeded") == 2
    assert "(openai.chat.completion) ..." in log
    assert "(agentlightning.annotation) ..." in log
    assert "Attribute keys: [" in log
    # The reward is matched to the LLM call, whose token ids came back from the loopback server.
    adapted = [line for line in log.splitlines() if "Adapted data: [Triplet(" in line]
    assert len(adapted) == 2 and all("reward=1.0" in line for line in adapted)
    assert "Finished 2 rollouts." in log
