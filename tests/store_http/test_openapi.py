"""The REST API matches its OpenAPI document: a bounded schemathesis run against `agl store --backend sqlite`.

The `schemathesis run` command runs every phase on every documented operation: the coverage phase
(boundary values, missing fields, undocumented methods, which must get 405 with an exact `Allow`), fuzzing
with valid and invalid data, and stateful sequences (create, then use, what was created). Every check must
pass: no 5xx, only documented status codes, bodies and content types, valid data accepted, invalid data
refused. Before, 25 valid requests were rejected and 17 `Allow` headers were wrong. Generation is
deterministic and small (`--max-examples 2`), so the run takes about 12 s.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("schemathesis", reason="schemathesis is a dev dependency: pip install -e .[dev]")

from agentlightning.web.launcher import pick_free_port  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`agl store` serving a SQLite file (the strictest backend about integers) in a child process."""
    path = tmp_path_factory.mktemp("openapi") / "store.db"
    port = pick_free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "AGL_STORE_TOKEN": ""}
    command = [sys.executable, "-m", "agentlightning.cli", "store", "--backend", "sqlite", "--path", str(path)]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--log-level", "WARNING"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{endpoint}/v1/agl/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"agl store did not answer on {endpoint} within 30 s")
        yield endpoint
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def _schemathesis() -> list[str]:
    executable = shutil.which("schemathesis", path=os.path.dirname(sys.executable)) or shutil.which("schemathesis")
    if executable is None:
        pytest.skip("the schemathesis command is not installed next to this Python")
    return [executable]


@pytest.mark.slow
def test_every_operation_answers_as_documented(store_endpoint: str, tmp_path: Path) -> None:
    command = [
        *_schemathesis(),
        "run",
        f"{store_endpoint}/openapi.json",
        "--checks",
        "all",
        "--mode",
        "all",  # valid and invalid data
        "--max-examples",
        "2",
        "--generation-deterministic",
        "--max-response-time",
        "60",  # a long-poll may hold a request for its `wait` (30 s at most)
        "--request-timeout",
        "90",
        "--no-color",
    ]
    run = subprocess.run(  # in tmp_path: schemathesis keeps a cache (.schemathesis/) in its working directory
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "NO_COLOR": "1"}, cwd=tmp_path
    )
    report = run.stdout + run.stderr
    tested = re.search(r"Tested: (\d+)", report)
    generated = re.search(r"(\d+) generated", report)
    assert tested is not None and int(tested.group(1)) >= 30, report[-3000:]  # the whole REST API is documented
    assert generated is not None and int(generated.group(1)) >= 1000, report[-3000:]
    assert run.returncode == 0 and "No issues found" in report, report[-20000:]
