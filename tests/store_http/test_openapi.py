"""The REST API matches its OpenAPI document: a bounded schemathesis run against `agl store --backend sqlite`.

Every documented operation gets a few generated requests (valid and invalid); none may answer 5xx,
an undocumented status code, or a body that violates the documented schema.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a dev dependency: pip install -e .[dev]")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from agentlightning.utils.server_launcher import pick_free_port  # noqa: E402

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


@pytest.mark.slow
def test_every_operation_answers_as_documented(store_endpoint: str) -> None:
    schema = schemathesis.openapi.from_url(f"{store_endpoint}/openapi.json")
    checks = [not_a_server_error, status_code_conformance, response_schema_conformance, content_type_conformance]
    failures: dict[str, str] = {}
    operations = 0
    requests = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @settings(
            max_examples=8,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
        )
        def run(case: Any) -> None:
            nonlocal requests
            requests += 1
            case.call_and_validate(checks=checks)

        try:
            run()
        except BaseException as exc:  # schemathesis raises a BaseExceptionGroup; report every operation at once
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            failures[operation.label] = str(exc)[:2000]
    assert operations >= 30  # the whole REST API is documented, not a handful of routes
    assert requests >= 200, requests
    assert not failures, "\n\n".join(f"{label}:\n{message}" for label, message in failures.items())
