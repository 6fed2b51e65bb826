"""The multi-node recipe of docs/multi-node.md, command by command, on this machine.

PostgreSQL on 127.0.0.1 stands in for the head's database, `agl store --backend postgres` runs as a real
subprocess, a local Ray cluster (head without CPUs + two worker nodes) stands in for `ray start`, and
`examples/multinode/train_ray.py` runs as the documented command, training a tiny model with GRPO on CPU.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.execution.conftest import pick_free_port

ray = pytest.importorskip("ray", reason="the ray extra is part of the dev extra")
psycopg = pytest.importorskip("psycopg", reason="the postgres extra is part of the dev extra")
from tests.store.backends import POSTGRES_DSN  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.train, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "recipe-token"


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh PostgreSQL database for the store (dropped afterwards)."""
    try:
        admin = psycopg.connect(POSTGRES_DSN, autocommit=True, connect_timeout=3)
    except Exception as exc:
        pytest.skip(f"no PostgreSQL reachable at {POSTGRES_DSN} (set AGL_TEST_POSTGRES_DSN): {exc}")
    name = f"agl_recipe_{uuid.uuid4().hex[:10]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield POSTGRES_DSN.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(POSTGRES_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def agl_store(database: str) -> Iterator[str]:
    """`agl store --backend postgres --dsn ... --host 0.0.0.0 --port P --auth-token T` as on the head node."""
    port = pick_free_port()
    command = [sys.executable, "-m", "agentlightning.cli", "store", "--backend", "postgres", "--dsn", database]
    command += ["--host", "0.0.0.0", "--port", str(port), "--auth-token", TOKEN]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/v1/agl/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read().decode() if process.stdout else ""
                raise AssertionError(f"agl store did not come up: {output[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_recipe_trains_with_grpo_through_agl_store_on_postgres_and_ray_runners(
    tmp_path: Path, agl_store: str, ray_cluster: Any
) -> None:
    from tests.support.tiny_model import tiny_model

    model, tokenizer = tiny_model()
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    checkpoint_dir = tmp_path / "run"

    command = [sys.executable, str(ROOT / "examples" / "multinode" / "train_ray.py"), "--store-url", agl_store]
    command += ["--ray-address", ray_cluster.address, "--algorithm", "grpo", "--model", str(model_dir)]
    command += ["--n-runners", "2", "--steps", "1", "--checkpoint-dir", str(checkpoint_dir), "--device", "cpu"]
    env = {**os.environ, "AGL_STORE_TOKEN": TOKEN}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "done: 2 runner actors" in result.stdout

    metrics = [json.loads(line) for line in (checkpoint_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1]

    from agentlightning.store.client import LightningStoreClient

    async def inspect() -> tuple[list[str], set[str]]:
        client = LightningStoreClient(agl_store, auth_token=TOKEN)
        try:
            rollouts = (await client.query_rollouts()).items
            workers = {w.worker_id for w in await client.query_workers()}
            return [r.status for r in rollouts], workers
        finally:
            await client.close()

    statuses, workers = asyncio.run(inspect())
    assert statuses == ["succeeded"] * 4, "batch_size 2 x group_size 2 rollouts, all in PostgreSQL"
    assert workers == {"Worker-0", "Worker-1"}
