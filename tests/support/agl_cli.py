"""Run `agl <command>` as a real subprocess, as a user would in another terminal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

import httpx

__all__ = ["STARTUP_TIMEOUT", "running"]

STARTUP_TIMEOUT = 60.0


@contextmanager
def running(args: list[str], health_url: str, env: Optional[dict[str, str]] = None) -> Iterator[subprocess.Popen[str]]:
    """Run `agl ARGS` until `health_url` answers 200; stop it with SIGINT afterwards and check it exits cleanly."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agentlightning.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if process.poll() is not None:
                output = process.stdout.read() if process.stdout else ""
                raise AssertionError(f"agl {' '.join(args)} exited with {process.returncode}:\n{output}")
            try:
                if httpx.get(health_url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"agl {' '.join(args)} not healthy after {STARTUP_TIMEOUT}s"
            time.sleep(0.1)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    assert process.returncode == 0, process.stdout.read() if process.stdout else ""
