"""Failure behaviour of the client-server strategy with a real Trainer, runners and store.

Ctrl+C on the main process, a runner killed mid-rollout, a crashing algorithm and a crashing runner.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

import agentlightning as agl
from agentlightning.algorithm import algo
from agentlightning.runner import LitAgentRunner
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import NamedResources, Rollout, RolloutConfig

from .conftest import leftover_children, pick_free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
GRACEFUL = 1.0
TERMINATE = 2.0


def cs_strategy(**kwargs: Any) -> dict[str, Any]:
    return {
        "type": "cs",
        "server_host": "127.0.0.1",
        "server_port": pick_free_port(),
        "graceful_timeout": GRACEFUL,
        "terminate_timeout": TERMINATE,
        **kwargs,
    }


def fast_runner() -> dict[str, Any]:
    return {"poll_interval": 0.05, "heartbeat_interval": 60.0}


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


CTRL_C_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    import agentlightning as agl
    from agentlightning.algorithm import algo

    class SlowAgent(agl.LitAgent):
        async def rollout_async(self, task, resources, rollout):
            await asyncio.sleep(3600)

    @algo
    async def waiting_algorithm(*, store):
        ids = [(await store.enqueue_rollout(input=i)).rollout_id for i in range(4)]
        while len(await store.query_rollouts(status_in=["running", "preparing"])) < 2:
            await asyncio.sleep(0.05)
        print("READY", flush=True)
        await store.wait_for_rollouts(rollout_ids=ids)

    trainer = agl.Trainer(
        algorithm=waiting_algorithm,
        n_runners=2,
        strategy={{"type": "cs", "server_host": "127.0.0.1", "server_port": {port},
                   "graceful_timeout": {graceful}, "terminate_timeout": {terminate}}},
        tracer=agl.OtelTracer(),
        runner={{"poll_interval": 0.05, "heartbeat_interval": 60.0}},
    )
    try:
        trainer.fit(SlowAgent(), [])
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        sys.exit(130)
    """
)


@pytest.mark.slow
def test_ctrl_c_stops_everything_and_leaves_no_child(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(CTRL_C_SCRIPT.format(port=pick_free_port(), graceful=GRACEFUL, terminate=TERMINATE))
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
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 2

        proc.send_signal(signal.SIGINT)
        # Shutdown takes graceful + terminate timeouts at most; the margin covers interpreter exit on a busy machine.
        output, _ = proc.communicate(timeout=GRACEFUL + TERMINATE + 15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert "INTERRUPTED" in output, output
    assert proc.returncode == 130
    assert [c.pid for c in children if _alive(c.pid)] == []


class KillableAgent(agl.LitAgent[str]):
    """Attempt 1 reports its pid and hangs (to be SIGKILLed); later attempts record a success."""

    async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        workdir = Path(task)
        attempt = rollout.attempt.sequence_id  # type: ignore[attr-defined]
        if attempt == 1:
            agl.emit_message("started")  # a span: the attempt is now running and has a heartbeat
            (workdir / "victim.pid").write_text(str(os.getpid()))
            await asyncio.sleep(3600)
        with (workdir / "successes.txt").open("a") as handle:
            handle.write(f"{rollout.rollout_id} attempt {attempt}\n")
        return 1.0


@pytest.mark.slow
def test_runner_killed_mid_rollout_is_retried_by_another_runner(tmp_path: Path) -> None:
    store = InMemoryLightningStore(thread_safe=True, scan_debounce_seconds=0.0)
    outcome: dict[str, Any] = {}

    @algo
    async def kill_one_runner(*, store: agl.LightningStore) -> None:
        config = RolloutConfig(unresponsive_seconds=1.0, max_attempts=2, retry_condition=["unresponsive", "timeout"])
        rollout = await store.enqueue_rollout(input=str(tmp_path), config=config)
        pid_file = tmp_path / "victim.pid"
        while not pid_file.exists() or not pid_file.read_text():
            await asyncio.sleep(0.05)
        victim = int(pid_file.read_text())
        outcome["victim"] = victim
        os.kill(victim, signal.SIGKILL)
        while True:
            current = await store.get_rollout_by_id(rollout.rollout_id)
            assert current is not None
            if current.is_terminal():
                break
            await asyncio.sleep(0.1)
        outcome["rollout"] = current
        outcome["attempts"] = list(await store.query_attempts(rollout.rollout_id))

    trainer = agl.Trainer(
        algorithm=kill_one_runner,
        n_runners=2,
        store=store,
        strategy=cs_strategy(),
        tracer=OtelTracer(),
        runner=fast_runner(),
    )
    # The algorithm finished with the runner left, so fit returns; the SIGKILL was logged when it happened.
    trainer.fit(KillableAgent(), [])

    assert outcome["rollout"].status == "succeeded"
    assert [a.status for a in outcome["attempts"]] == ["unresponsive", "succeeded"]
    successes = (tmp_path / "successes.txt").read_text().splitlines()
    assert successes == [f"{outcome['rollout'].rollout_id} attempt 2"]
    assert leftover_children() == []


class EchoAgent(agl.LitAgent[int]):
    async def rollout_async(self, task: int, resources: NamedResources, rollout: Rollout) -> float:
        return float(task)


@pytest.mark.slow
def test_crashing_algorithm_stops_the_runners() -> None:
    @algo
    async def crashing(*, store: agl.LightningStore) -> None:
        rollout = await store.enqueue_rollout(input=1)
        while not (await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=0)):
            await asyncio.sleep(0.05)
        raise RuntimeError("algorithm crashed after one rollout")

    trainer = agl.Trainer(
        algorithm=crashing, n_runners=2, strategy=cs_strategy(), tracer=OtelTracer(), runner=fast_runner()
    )
    with pytest.raises(RuntimeError, match="algorithm crashed after one rollout"):
        trainer.fit(EchoAgent(), [])
    assert leftover_children() == []


class CrashingRunner(LitAgentRunner[Any]):
    def init_worker(self, worker_id: int, store: agl.LightningStore, **kwargs: Any) -> None:
        raise RuntimeError(f"runner {worker_id} cannot start")


@pytest.mark.slow
def test_crashing_runners_do_not_hang_the_algorithm() -> None:
    seen: dict[str, bool] = {}

    @algo
    async def waits_for_ever(*, store: agl.LightningStore) -> None:
        rollout = await store.enqueue_rollout(input=1)
        try:
            await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id])
        except asyncio.CancelledError:
            seen["cancelled"] = True
            raise

    trainer = agl.Trainer(
        algorithm=waits_for_ever,
        n_runners=2,
        strategy=cs_strategy(),
        tracer=OtelTracer(),
        runner={"type": CrashingRunner, "poll_interval": 0.05},
    )
    with pytest.raises(RuntimeError, match=r"exited with code 1"):
        trainer.fit(EchoAgent(), [])
    assert seen == {"cancelled": True}
    assert leftover_children() == []


def test_leftover_children_sees_a_child_this_test_started() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert proc.pid in [child.pid for child in leftover_children()]
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in [child.pid for child in leftover_children()]
