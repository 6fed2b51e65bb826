"""Two training scripts started together against one `agl store`: each run's runners take only its own rollouts.

The scripts' tasks have different keys (as two different projects' would), so a rollout run by the other
script's agent fails with a KeyError. Each agent's first rollout waits (bounded) until the other script's
agent has begun one, so both runs' rollouts are in the store's queue at the same time.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentlightning.store_http.client import LightningStoreClient
from agentlightning.trainer.run_store import RUN_METADATA_KEY
from agentlightning.utils.server_launcher import pick_free_port
from tests.support.agl_cli import running

ROOT = Path(__file__).resolve().parents[2]
SCRIPT_TIMEOUT = 180

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys
    import time
    from pathlib import Path

    import agentlightning as agl

    NAME, OTHER, WORK = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    agl.setup_logging("WARNING")


    class Agent(agl.LitAgent[dict]):
        async def rollout_async(self, task, resources, rollout):
            value = task[NAME]  # the other script's tasks have no such key
            with open(WORK / f"{NAME}.seen", "a") as seen:
                seen.write(rollout.rollout_id + "\\n")
            deadline = time.monotonic() + 60
            while not (WORK / f"{OTHER}.seen").exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return float(value)


    if __name__ == "__main__":
        trainer = agl.Trainer(
            algorithm=agl.Baseline(polling_interval=0.1),
            n_runners=2,
            tracer=agl.OtelTracer(),
            runner={"poll_interval": 0.2, "heartbeat_interval": 60.0},
        )
        trainer.fit(Agent(), train_dataset=[{NAME: i % 2} for i in range(6)])
    """
)


async def _runs(url: str) -> dict[str, list[tuple[str, str]]]:
    """(rollout id, status) of every rollout in the store, by run."""
    client = LightningStoreClient(url)
    try:
        by_run: dict[str, list[tuple[str, str]]] = {}
        for rollout in await client.query_rollouts():
            run = str((rollout.metadata or {}).get(RUN_METADATA_KEY))
            by_run.setdefault(run, []).append((rollout.rollout_id, rollout.status))
        return by_run
    finally:
        await client.close()


@pytest.mark.slow
def test_two_scripts_at_once_on_one_agl_store_both_succeed(tmp_path: Path) -> None:
    port = pick_free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGL_STORE_URL": url}
    for name in ("alpha", "beta"):
        (tmp_path / f"{name}.py").write_text(SCRIPT)
    with running(["store", "--port", str(port), "--log-level", "WARNING"], f"{url}/v1/agl/health"):
        processes = {
            name: subprocess.Popen(
                [sys.executable, str(tmp_path / f"{name}.py"), name, other, str(tmp_path)],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for name, other in (("alpha", "beta"), ("beta", "alpha"))
        }
        outputs: dict[str, str] = {}
        for name, process in processes.items():
            try:
                outputs[name], _ = process.communicate(timeout=SCRIPT_TIMEOUT)
            except subprocess.TimeoutExpired:
                for other in processes.values():
                    other.kill()
                raise AssertionError(f"{name}.py hung for {SCRIPT_TIMEOUT} s") from None
        for name, process in processes.items():
            assert process.returncode == 0, f"{name}.py exited with {process.returncode}:\n{outputs[name]}"
            assert "6 rollouts: 6 succeeded, 0 failed" in outputs[name], outputs[name]
        by_run = asyncio.run(_runs(url))

    assert len(by_run) == 2, by_run
    for name in ("alpha", "beta"):
        (run,) = [run for run in by_run if run.startswith(f"{name}.py ")]
        seen = (tmp_path / f"{name}.seen").read_text().split()
        assert sorted(seen) == sorted(rollout_id for rollout_id, _ in by_run[run])  # its runners ran all of its own
        assert {status for _, status in by_run[run]} == {"succeeded"}
