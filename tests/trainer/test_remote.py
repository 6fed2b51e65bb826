"""Sending a run to a store server that is already running (`agl store`), and the port of a run's own store.

`AGL_STORE_URL` or `Trainer(store="http://...")` makes the run use that server (no server of its own, no
port clash); a clash on the run's own port says so; port 0 works with runner processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import agentlightning as agl
from agentlightning.store_http.client import LightningStoreClient
from agentlightning.tracer.otel import OtelTracer
from agentlightning.trainer import remote
from agentlightning.trainer.run_store import RUN_METADATA_KEY
from agentlightning.types import NamedResources, Rollout
from agentlightning.web.launcher import pick_free_port
from tests.support.agl_cli import running


class Doubler(agl.LitAgent[int]):
    async def rollout_async(self, task: int, resources: NamedResources, rollout: Rollout) -> float:
        return float(task * 2)


@pytest.fixture(scope="module")
def agl_store() -> Iterator[str]:
    """`agl store` (memory backend) in a subprocess, started before the runs as a user would."""
    port = pick_free_port()
    url = f"http://127.0.0.1:{port}"
    with running(["store", "--port", str(port), "--log-level", "WARNING"], f"{url}/v1/agl/health"):
        yield url


def _fast(**kwargs: Any) -> agl.Trainer:
    return agl.Trainer(
        algorithm=agl.Baseline(polling_interval=0.05),
        n_runners=1,
        tracer=OtelTracer(),
        runner={"poll_interval": 0.05, "heartbeat_interval": 60.0},
        **kwargs,
    )


async def _rollouts_of(url: str, run: str) -> list[Any]:
    client = LightningStoreClient(url)
    try:
        return [r for r in await client.query_rollouts() if (r.metadata or {}).get(RUN_METADATA_KEY) == run]
    finally:
        await client.close()


def test_agl_store_url_makes_the_trainer_use_that_store_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run itself is tests/test_first_hour.py's walk; here: nothing is served again, no port is taken."""
    monkeypatch.setenv("AGL_STORE_URL", "http://127.0.0.1:4747")
    trainer = agl.Trainer()
    assert isinstance(trainer.store, LightningStoreClient) and trainer.store.server_root == "http://127.0.0.1:4747"
    assert trainer.strategy.managed_store is False  # type: ignore[attr-defined]
    explicit = agl.Trainer(store="http://127.0.0.1:4800", strategy="shm")
    assert isinstance(explicit.store, LightningStoreClient) and explicit.strategy.managed_store is False  # type: ignore[attr-defined]


def test_a_run_sent_by_url_is_tagged_and_summarized(agl_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = _fast(store=agl_store, run_name="url run")
    trainer.fit(Doubler(), train_dataset=[1, 2])
    mine = asyncio.run(_rollouts_of(agl_store, "url run"))
    assert sorted(r.input for r in mine) == [1, 2] and {r.status for r in mine} == {"succeeded"}
    assert f"store: LightningStoreClient to the store server at {agl_store}" in capsys.readouterr().out


def test_a_port_clash_with_agl_store_explains_how_to_use_it(agl_store: str) -> None:
    port = int(agl_store.rsplit(":", 1)[1])
    trainer = _fast(port=port)
    with pytest.raises(agl.RunError) as raised:
        trainer.fit(Doubler(), train_dataset=[1])
    message = str(raised.value)
    assert f"port {port} is in use by an agentlightning store at {agl_store}" in message
    assert f"AGL_STORE_URL={agl_store}" in message and f"Trainer(store='{agl_store}')" in message
    assert "Trainer(port=0)" in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # no chained wall of text


def test_port_zero_serves_the_run_on_a_free_port_with_runner_processes(capsys: pytest.CaptureFixture[str]) -> None:
    trainer = _fast(port=0, run_name="port zero")
    trainer.fit(Doubler(), train_dataset=[3])
    assert trainer.last_summary is not None and trainer.last_summary.succeeded == 1
    assert "InMemoryLightningStore served at http://localhost:" in capsys.readouterr().out


def test_a_store_url_that_does_not_answer_fails_within_the_connect_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "STORE_CONNECT_TIMEOUT_SECONDS", 0.5)
    url = f"http://127.0.0.1:{pick_free_port()}"
    trainer = _fast(store=url)
    with pytest.raises(agl.RunError, match=r"no agentlightning store answered at .* within 0.5 s") as raised:
        trainer.fit(Doubler(), train_dataset=[1])
    assert "`agl store`" in str(raised.value) and "store=..." in str(raised.value)


def test_a_bad_agl_store_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_STORE_URL", "127.0.0.1:4747")
    with pytest.raises(ValueError, match="AGL_STORE_URL='127.0.0.1:4747' is not an http"):
        agl.Trainer()


def test_agl_managed_store_0_alone_fails_at_once_instead_of_hanging(monkeypatch: pytest.MonkeyPatch) -> None:
    """v0.3's recipe without a store to share: runners would each get a private copy of the store."""
    monkeypatch.setenv("AGL_MANAGED_STORE", "0")
    with pytest.raises(agl.RunError, match="AGL_STORE_URL=http://HOST:PORT") as raised:
        _fast(port=0).fit(Doubler(), train_dataset=[1])
    assert "InMemoryLightningStore is private to this process" in str(raised.value)
