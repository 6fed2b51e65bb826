"""A training run survives a restart of its store server: nothing lost, every rollout completed exactly once.

`agl store --backend sqlite` serves the store; `Trainer.fit` (client-server strategy, two runner
processes, the store given as a `LightningStoreClient`) trains against it. Once a few rollouts have
run, the server is stopped, left down for 3 s, and started again on the same file and port. The
clients' retry budget covers the outage, so the algorithm and the runners carry on.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentlightning.store.sqlite import SqliteLightningStore

from .test_roles import _clean_env, _finish, _launch, _stop, _wait_healthy, pick_free_port

N_TASKS = 12

TRAIN_SCRIPT = textwrap.dedent(
    """
    import asyncio, os, sys, time
    import agentlightning as agl
    from agentlightning.algorithm import algo
    from agentlightning.types import RolloutConfig

    url, out = sys.argv[1], sys.argv[2]

    class SlowEchoAgent(agl.LitAgent):
        async def rollout_async(self, task, resources, rollout):
            with open(os.path.join(out, "executions.txt"), "a") as handle:
                handle.write(f"{rollout.rollout_id} {task}\\n")
            await asyncio.sleep(0.4)
            return float(task)

    @algo
    async def enqueue_and_wait(*, store, train_dataset):
        # A timeout turns an attempt orphaned by the outage into a retry instead of a hang.
        config = RolloutConfig(timeout_seconds=30, max_attempts=3)
        ids = [(await store.enqueue_rollout(input=t, mode="train", config=config)).rollout_id for t in train_dataset]
        while len(await store.wait_for_rollouts(rollout_ids=ids, timeout=0)) < len(ids):
            await asyncio.sleep(0.1)

    trainer = agl.Trainer(
        algorithm=enqueue_and_wait,
        n_runners=2,
        store=agl.LightningStoreClient(url),
        tracer=agl.OtelTracer(),
        runner={"poll_interval": 0.05, "heartbeat_interval": 60.0},
    )
    trainer.fit(SlowEchoAgent(), train_dataset=list(range(1, N_TASKS + 1)))
    print("FIT DONE", flush=True)
    """
).replace("N_TASKS", str(N_TASKS))


def _executions(out: Path) -> list[str]:
    path = out / "executions.txt"
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.slow
def test_fit_carries_on_across_a_store_server_restart(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    db = tmp_path / "store.db"
    port = pick_free_port()
    url = f"http://127.0.0.1:{port}"
    store_command = [sys.executable, "-m", "agentlightning.cli", "store", "--backend", "sqlite", "--path", str(db)]
    store_command += ["--host", "127.0.0.1", "--port", str(port)]
    store_proc = _launch(store_command, _clean_env(), tmp_path / "store-1.log")
    restarted = None
    train_log = tmp_path / "train.log"
    train_proc = None
    try:
        _wait_healthy(url, store_proc, tmp_path / "store-1.log")
        train_proc = _launch(
            [sys.executable, str(script), url, str(tmp_path)], _clean_env(AGL_MANAGED_STORE="0"), train_log
        )
        deadline = time.monotonic() + 90
        while len(_executions(tmp_path)) < 3:
            assert time.monotonic() < deadline and train_proc.poll() is None, train_log.read_text()
            time.sleep(0.05)

        store_proc.send_signal(signal.SIGTERM)  # a restart: the server goes away mid-run...
        store_proc.wait(timeout=30)
        during_outage = len(_executions(tmp_path))
        time.sleep(3.0)
        assert train_proc.poll() is None, f"the run died with the server:\n{train_log.read_text()}"
        restarted = _launch(store_command, _clean_env(), tmp_path / "store-2.log")  # ...and comes back
        _wait_healthy(url, restarted, tmp_path / "store-2.log")

        assert _finish(train_proc, train_log, timeout=120) == 0, train_log.read_text()
        assert "FIT DONE" in train_log.read_text()
        assert during_outage < N_TASKS  # the restart really happened under the running fit
    finally:
        _stop(train_proc)
        _stop(restarted)
        _stop(store_proc)

    async def check() -> None:
        store = SqliteLightningStore(db)
        try:
            rollouts = await store.query_rollouts()
            assert len(rollouts) == N_TASKS
            assert {r.status for r in rollouts} == {"succeeded"}
            for rollout in rollouts:
                attempts = await store.query_attempts(rollout.rollout_id)
                assert [a.status for a in attempts].count("succeeded") == 1, (rollout.rollout_id, attempts)
                spans = await store.query_spans(rollout.rollout_id)
                assert spans.total >= 1, rollout.rollout_id  # the reward span made it through the restart
        finally:
            await store.close()

    asyncio.run(check())
    executed = [line.split()[1] for line in _executions(tmp_path)]
    assert sorted(set(executed), key=int) == [str(t) for t in range(1, N_TASKS + 1)]
