"""`agl gateway` as its own service over a SQLite file: calls and events are stored, and a restart loses
nothing acknowledged while the keys it handed out stay valid (same secret)."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from agentlightning.emitter import find_final_reward
from agentlightning.gateway import attempt_key, rollout_urls
from agentlightning.store.sqlite import SqliteLightningStore
from agentlightning.types import Span
from tests.support.openai_server import OpenAITestServer

ROOT = Path(__file__).resolve().parents[2]


class GatewayProcess:
    """`python -m agentlightning.cli gateway ...` with its announced endpoint."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agentlightning.cli", "gateway", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        assert self.process.stdout is not None
        stdout = self.process.stdout
        threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
        self.output: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            self.output.append(line)
            if "agl gateway serving at " in line:
                self.endpoint = line.split("serving at ", 1)[1].split()[0]
                return
        self.stop()
        raise AssertionError("agl gateway did not start:\n" + "".join(self.output))

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


@pytest.mark.slow
def test_gateway_service_over_sqlite_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"

    async def seed() -> tuple[str, str]:
        store = SqliteLightningStore(db)
        try:
            attempted = await store.start_rollout(input={"q": "hi"}, mode="train")
            return attempted.rollout_id, attempted.attempt.attempt_id
        finally:
            await store.close()

    rollout_id, attempt_id = asyncio.run(seed())
    key = {"Authorization": f"Bearer {attempt_key('s3cret', rollout_id, attempt_id)}"}
    with OpenAITestServer() as backend:
        args = ["--backend", "sqlite", "--path", str(db), "--port", "0", "--secret", "s3cret"]
        service = GatewayProcess(*args, "--upstream", backend.base_url, "--log-level", "WARNING")
        base_url, events_url = rollout_urls(service.endpoint, rollout_id, attempt_id, "train")
        chat = httpx.post(
            base_url + "/chat/completions",
            headers=key,
            json={"model": "m", "messages": [{"role": "user", "content": "hello"}]},
            timeout=30,
        )
        assert chat.status_code == 200, chat.text
        note = httpx.post(events_url, headers=key, json={"event_type": "step", "data": {"n": 1}}, timeout=30)
        assert note.status_code == 201, note.text
        assert service.stop() == 0

        service = GatewayProcess(*args, "--upstream", backend.base_url)
        _, events_url = rollout_urls(service.endpoint, rollout_id, attempt_id, "train")
        reward = httpx.post(events_url, headers=key, json={"event_type": "reward", "data": {"value": 0.9}}, timeout=30)
        assert reward.status_code == 201, reward.text
        refused = httpx.post(events_url, headers={"Authorization": "Bearer nope"}, json={"event_type": "x"}, timeout=30)
        assert refused.status_code == 401
        assert service.stop() == 0
        expected_ids = backend.responses[0]["prompt_token_ids"]

    async def read() -> list[Span]:
        store = SqliteLightningStore(db)
        try:
            return list(await store.query_spans(rollout_id))
        finally:
            await store.close()

    spans = asyncio.run(read())
    assert [s.name for s in spans] == [
        "openai.chat.completion",
        "agentlightning.annotation",
        "agentlightning.annotation",
    ]
    assert [s.sequence_id for s in spans] == [1, 2, 3]
    assert spans[0].attributes["prompt_token_ids"] == expected_ids
    assert find_final_reward(spans) == 0.9


def test_gateway_cli_refuses_bad_upstreams(tmp_path: Path) -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentlightning.cli",
            "gateway",
            "--path",
            str(tmp_path / "x.db"),
            "--upstream",
            "ftp://x",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 1 and "bad gateway upstream" in completed.stderr


def test_gateway_cli_takes_a_body_size_limit() -> None:
    from agentlightning.cli.gateway import build_parser

    assert build_parser().parse_args(["--max-body-size", "8MB"]).max_body_size == 8 * 1024 * 1024
    assert build_parser().parse_args([]).max_body_size == 32 * 1024 * 1024
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--max-body-size", "lots"])
