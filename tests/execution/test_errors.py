"""A `RunError` that reaches the top of a script is one line, and the command lines word their advice as flags."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BUSY_PORT_SCRIPT = """
import socket, sys
import agentlightning as agl

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()

@agl.rollout
def agent(task, llm=None) -> float:
    return 1.0

agl.Trainer(algorithm=agl.Baseline(), n_runners=1, port=sock.getsockname()[1]).fit(agent, train_dataset=[{"x": 1}])
"""


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for name in ("AGL_SERVER_PORT", "AGL_STORE_URL", "AGL_CURRENT_ROLE", "AGL_MANAGED_STORE"):
        env.pop(name, None)
    return env


def test_a_busy_port_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    script = tmp_path / "busy.py"
    script.write_text(BUSY_PORT_SCRIPT, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=_env(), cwd=tmp_path
    )
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr
    assert lines[-1].startswith("RunError: port ") and "is in use by another program" in lines[-1]


def test_other_errors_keep_their_traceback(tmp_path: Path) -> None:
    script = tmp_path / "boom.py"
    script.write_text(
        "from agentlightning.execution.errors import report_run_errors_in_one_line\n"
        "report_run_errors_in_one_line()\nreport_run_errors_in_one_line()\nraise KeyError('question')\n",
        encoding="utf-8",
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=_env())
    assert result.returncode == 1
    assert "Traceback" in result.stderr and result.stderr.rstrip().endswith("KeyError: 'question'")


def test_agl_store_on_a_busy_port_advises_the_flag() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "agentlightning.cli", "store", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
            env=_env(),
        )
    assert result.returncode == 1
    assert "pass --port 0 to pick a free one" in result.stderr and "port=0" not in result.stderr
