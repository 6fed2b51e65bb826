"""What the user of a training script sees in the terminal when its agent fails or when they press Ctrl-C.

Both run a real script in its own process group, as a terminal would: a failing agent prints its first
traceback in full and one line per later failure, and the script exits non-zero; Ctrl-C (SIGINT to the
whole group) stops the script, its runner processes and a blocking agent with a few lines.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil

from tests.support.run_output import without_progress

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import agentlightning as agl

    agl.setup_logging("WARNING", color=False)

    @agl.rollout
    def agent(task: dict, llm: agl.LLM) -> float:
        if sys.argv[1] == "hang":
            print("RUNNING", flush=True)
            time.sleep(3600)  # blocks the runner's thread: only a signal gets it out
        raise ZeroDivisionError(f"task {task['i']} divided by zero")

    trainer = agl.Trainer(algorithm=agl.Baseline(polling_interval=0.1), n_runners=2, port=0,
                          runner={"poll_interval": 0.1}, tracer=agl.OtelTracer(),
                          initial_resources={"llm": agl.LLM(endpoint="http://127.0.0.1:9/v1", model="none")})
    trainer.fit(agent, train_dataset=[{"i": i} for i in range(6)])
    """
)


def _start(tmp_path: Path, mode: str) -> subprocess.Popen[str]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return subprocess.Popen(
        [sys.executable, str(script), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        start_new_session=True,  # its own process group, like a job in a terminal
    )


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_failing_agent_shows_one_traceback_then_one_line_per_failure_and_exits_nonzero(tmp_path: Path) -> None:
    process = _start(tmp_path, "fail")
    try:
        output, _ = process.communicate(timeout=120)
    finally:
        _stop(process)
    lines = output.splitlines()
    assert process.returncode == 1, output
    assert output.count("Traceback (most recent call last)") == 1, output  # the first failure's; fit's is one line
    failures = [line for line in lines if " failed" in line and "rollout ro-" in line]
    assert len(failures) == 6, output
    assert sum("Its traceback follows" in line for line in lines) == 1
    assert "6 rollouts: 0 succeeded, 6 failed" in output
    assert "  failed: 1 x ZeroDivisionError: task 0 divided by zero; 1 x ZeroDivisionError: task 1" in output
    assert lines[-1].startswith("RolloutsFailedError: all 6 rollouts failed (")
    assert len(without_progress(lines)) < 80, output  # one agent traceback, not one per rollout


def test_ctrl_c_stops_the_script_its_runners_and_a_blocked_agent_with_a_few_lines(tmp_path: Path) -> None:
    process = _start(tmp_path, "hang")
    try:
        assert process.stdout is not None
        for _ in range(200):  # until both runners are inside the agent
            if process.stdout.readline().strip() == "RUNNING":
                break
        children = psutil.Process(process.pid).children(recursive=True)
        os.killpg(process.pid, signal.SIGINT)
        # The default shutdown waits 10 s per step for a runner that ignores the stop event; after Ctrl-C each
        # step waits 1 s, so the whole group is gone well before the first default step would end.
        output, _ = process.communicate(timeout=9)
    finally:
        _stop(process)
    # A slow start prints progress lines before Ctrl-C: they are not part of what Ctrl-C prints.
    lines = [line for line in without_progress(output.splitlines()) if line.strip() and line.strip() != "RUNNING"]
    assert process.returncode != 0
    assert lines[0].startswith("agentlightning: interrupted after "), output
    assert lines[-1] == "KeyboardInterrupt", output
    assert len(lines) <= 10, output
    assert not [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
