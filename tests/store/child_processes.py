"""Parent side of the multi-process SQL store tests: start `sql_child` processes and talk to them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["Child", "start_children", "run_together"]

REPO_ROOT = Path(__file__).resolve().parents[2]


class Child:
    """One `python -m tests.store.sql_child ...` process with line-based JSON on stdout."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.store.sql_child", *args],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def read(self) -> dict[str, Any]:
        """The next JSON line; fails with the child's stderr when it exited instead."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(timeout=30)
            stderr = self.process.stderr.read() if self.process.stderr is not None else ""
            raise AssertionError(f"child exited with {self.process.returncode} before reporting:\n{stderr}")
        return json.loads(line)

    def wait_ready(self) -> None:
        assert "ready" in self.read()

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def finish(self, timeout: float = 120) -> list[dict[str, Any]]:
        """Every remaining JSON line, after the child exited successfully."""
        stdout, stderr = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0, f"child failed with {self.process.returncode}:\n{stderr}"
        return [json.loads(line) for line in stdout.splitlines() if line.strip()]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def start_children(arguments: list[list[str]]) -> list[Child]:
    """Start one child per argument list and wait until all have opened their store."""
    children = [Child(*args) for args in arguments]
    try:
        for child in children:
            child.wait_ready()
    except BaseException:
        for child in children:
            child.kill()
        raise
    return children


def run_together(children: list[Child]) -> list[list[dict[str, Any]]]:
    """Release all children at once and collect what each reported."""
    try:
        for child in children:
            child.go()
        return [child.finish() for child in children]
    finally:
        for child in children:
            child.kill()
