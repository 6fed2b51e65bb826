"""The `agl` command: help texts, and `agl store` / `agl prometheus` launched as real subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from agentlightning.cli import SUBCOMMANDS, main
from agentlightning.store import LightningStoreClient
from agentlightning.web.launcher import pick_free_port
from tests.support.agl_cli import running


def test_help_lists_every_subcommand_with_a_description(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name, (_, description) in SUBCOMMANDS.items():
        assert name in out and description in out


def test_unknown_command_fails_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err
    assert main([]) == 2


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("store", ["--host", "--port", "--backend", "--path", "--dsn", "--auth-token", "--cors-origin", "--tracker"]),
        ("prometheus", ["--host", "--port", "--metrics-path", "--log-level", "--access-log"]),
    ],
)
def test_subcommand_help(capsys: pytest.CaptureFixture[str], command: str, options: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for option in options:
        assert option in out


@pytest.mark.parametrize("name", ["mongo", "MongoDB"])
def test_store_backend_mongo_points_to_postgres(capsys: pytest.CaptureFixture[str], name: str) -> None:
    assert main(["store", "--backend", name]) == 2
    err = capsys.readouterr().err
    assert "no MongoDB backend" in err and "PostgreSQL is the multi-host backend" in err
    assert "--backend postgres --dsn" in err and "invalid choice" not in err


def test_store_unknown_backend_lists_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["store", "--backend", "redis"])
    assert exited.value.code == 2
    assert "unknown backend 'redis'; choose from memory, sqlite, postgres" in capsys.readouterr().err


def test_help_through_the_installed_entry_point() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agentlightning.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "store" in result.stdout


async def test_store_memory_backend_serves_clients() -> None:
    port = pick_free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with running(["store", "--port", str(port)], f"{endpoint}/v1/agl/health"):
        client = LightningStoreClient(endpoint)
        rollout = await client.enqueue_rollout(input={"task": 1})
        assert (await client.dequeue_rollout(worker_id="w")).rollout_id == rollout.rollout_id  # type: ignore[union-attr]
        assert (await client.statistics()).get("name") == "InMemoryLightningStore"
        await client.close()


async def test_store_sqlite_backend_keeps_data_across_restarts(tmp_path: Path) -> None:
    port = pick_free_port()
    endpoint = f"http://127.0.0.1:{port}"
    args = ["store", "--port", str(port), "--backend", "sqlite", "--path", str(tmp_path / "store.db")]
    with running(args, f"{endpoint}/v1/agl/health"):
        client = LightningStoreClient(endpoint)
        rollout = await client.enqueue_rollout(input="persist me")
        await client.close()
    with running(args, f"{endpoint}/v1/agl/health"):
        client = LightningStoreClient(endpoint)
        again = await client.get_rollout_by_id(rollout.rollout_id)
        await client.close()
    assert again is not None and again.input == "persist me"


def _enqueue_twice_per_key(endpoint: str, keys: list[str]) -> list[int]:
    """Both tries of each key at once, each on its own connection (so they reach different server processes)."""
    from concurrent.futures import ThreadPoolExecutor

    def post(key: str) -> int:
        response = httpx.post(
            f"{endpoint}/v1/agl/queues/rollouts/enqueue",
            json={"rollouts": [{"input": key}]},
            headers={"Idempotency-Key": key, "Connection": "close"},
            timeout=60,
        )
        return response.status_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(post, [key for key in keys for _ in range(2)]))


@pytest.mark.slow
def test_store_workers_share_idempotency_so_a_retry_is_never_done_twice(tmp_path: Path) -> None:
    """With --n-workers 2 a retried POST reaching the other process used to run again (30 keys made 34 rollouts)."""
    port = pick_free_port()
    endpoint = f"http://127.0.0.1:{port}"
    args = [
        "store",
        "--port",
        str(port),
        "--backend",
        "sqlite",
        "--path",
        str(tmp_path / "store.db"),
        "--n-workers",
        "2",
    ]
    keys = [f"key-{i}" for i in range(30)]
    with running(args, f"{endpoint}/v1/agl/health"):
        statuses = _enqueue_twice_per_key(endpoint, keys)
        page = httpx.post(f"{endpoint}/v1/agl/rollouts/search", json={}, timeout=30).json()
    assert statuses == [201] * 60
    assert page["total"] == 30 and sorted(r["input"] for r in page["items"]) == sorted(keys)


def test_store_auth_token_from_flag_and_environment() -> None:
    port = pick_free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with running(["store", "--port", str(port), "--auth-token", "s3cret"], f"{endpoint}/v1/agl/health"):
        assert httpx.get(f"{endpoint}/v1/agl/rollouts").status_code == 401
        ok = httpx.get(f"{endpoint}/v1/agl/rollouts", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["total"] == 0
    port = pick_free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AGL_STORE_TOKEN": "env-token", "AGL_SERVER_PORT": str(port)}
    with running(["store"], f"{endpoint}/v1/agl/health", env=env):
        assert httpx.get(f"{endpoint}/v1/agl/rollouts").status_code == 401
        headers = {"Authorization": "Bearer env-token"}
        assert httpx.get(f"{endpoint}/v1/agl/rollouts", headers=headers).status_code == 200


def test_prometheus_serves_the_multiprocess_directory(tmp_path: Path) -> None:
    port = pick_free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    with running(["prometheus", "--port", str(port), "--metrics-path", "/metrics"], f"{endpoint}/health", env=env):
        scraped = httpx.get(f"{endpoint}/metrics")
        assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")


def test_prometheus_needs_its_directory(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    assert main(["prometheus"]) == 2
    assert "PROMETHEUS_MULTIPROC_DIR" in capsys.readouterr().err
