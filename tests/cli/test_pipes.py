"""`agl ... | head`: a reader that closes the pipe early ends the command quietly, without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("args", [["--help"], ["serve", "--help"], ["store", "--help"]])
def test_closed_stdout_gives_no_traceback(args: list[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to stdout now fails with EPIPE, like `| head` after it has exited
    try:
        result = subprocess.run(
            [sys.executable, "-m", "agentlightning.cli", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    # argparse already drops write errors of `--help` (exit 0); our own output ends with exit 1 like Python's docs advise.
    assert result.returncode == (1 if args == ["--help"] else 0)


def test_help_still_prints_in_full_to_a_live_pipe() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentlightning.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "agl <command>" in result.stdout and result.stderr == ""
