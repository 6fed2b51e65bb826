"""Ctrl+C during SharedMemoryExecutionStrategy: logged, bundles stopped, and `fit` returns (v0.3 behaviour)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import asyncio, logging, sys
    import agentlightning as agl
    from agentlightning.algorithm import algo

    logging.basicConfig(level=logging.WARNING, stream=sys.stdout)

    class SlowAgent(agl.LitAgent):
        async def rollout_async(self, task, resources, rollout):
            await asyncio.sleep(3600)

    @algo
    async def waiting_algorithm(*, store):
        ids = [(await store.enqueue_rollout(input=i)).rollout_id for i in range(2)]
        while len(await store.query_rollouts(status_in=["running", "preparing"])) < 1:
            await asyncio.sleep(0.05)
        print("READY", flush=True)
        await store.wait_for_rollouts(rollout_ids=ids)

    trainer = agl.Trainer(
        algorithm=waiting_algorithm,
        strategy={"type": "shm", "graceful_delay": 0.5, "join_timeout": 5.0},
        tracer=agl.OtelTracer(),
        runner={"poll_interval": 0.05, "heartbeat_interval": 60.0},
    )
    trainer.fit(SlowAgent())
    print("FIT RETURNED", flush=True)
    """
)


@pytest.mark.slow
def test_ctrl_c_in_shared_memory_logs_stops_and_returns(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.strip() == "READY":
                break
        assert lines and lines[-1].strip() == "READY", "".join(lines)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    assert "Interrupted by Ctrl+C: all bundles stopped" in output
    assert output.rstrip().endswith("FIT RETURNED"), output
    assert "KeyboardInterrupt" not in output
