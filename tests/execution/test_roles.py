"""The scaling-out recipes run as written: roles and env vars across separate processes.

1. Debugging with an external store: `agl store` in one process; the same training script as an
   algorithm process and as a runner process with `AGL_MANAGED_STORE=0` and `AGL_CURRENT_ROLE`.
2. Algorithm and runners on "separate machines": `AGL_SERVER_HOST/PORT` + `AGL_CURRENT_ROLE=algorithm`
   (the strategy serves the store) and `AGL_CURRENT_ROLE=runner` processes with `--n-runners 2`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Optional

import pytest

from .conftest import pick_free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
TASKS = [1, 2, 3, 4]
PROCESS_TIMEOUT = 120

TRAIN_SCRIPT = textwrap.dedent(
    """
    import argparse, asyncio, json, os, sys
    import agentlightning as agl
    from agentlightning.algorithm import algo

    parser = argparse.ArgumentParser()
    parser.add_argument("--external-store-address", default=None)
    parser.add_argument("--n-runners", type=int, default=1)
    parser.add_argument("--max-rollouts", type=int, default=None)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    class EchoAgent(agl.LitAgent):
        async def rollout_async(self, task, resources, rollout):
            with open(os.path.join(args.out, "executions.txt"), "a") as handle:
                handle.write(f"{os.getpid()} {task}\\n")
            return float(task)

    @algo
    async def echo_algorithm(*, store, train_dataset):
        ids = [(await store.enqueue_rollout(input=t, mode="train")).rollout_id for t in train_dataset]
        while True:
            done = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
            if len(done) == len(ids):
                break
            await asyncio.sleep(0.05)
        with open(os.path.join(args.out, "algorithm.json"), "w") as handle:
            json.dump({"pid": os.getpid(), "statuses": [r.status for r in done]}, handle)

    store = agl.LightningStoreClient(args.external_store_address) if args.external_store_address else None
    trainer = agl.Trainer(
        algorithm=echo_algorithm,
        n_runners=args.n_runners,
        max_rollouts=args.max_rollouts,
        store=store,
        tracer=agl.OtelTracer(),
        runner={"poll_interval": 0.05, "heartbeat_interval": 60.0},
    )
    try:
        trainer.fit(EchoAgent(), train_dataset=TASKS)
    except KeyboardInterrupt:
        sys.exit(130)
    """
).replace("TASKS", repr(TASKS))


def _clean_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGL_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.update(overrides)
    return env


def _launch(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(args, env=env, stdout=handle, stderr=subprocess.STDOUT)


def _finish(proc: subprocess.Popen[bytes], log: Path, timeout: float = PROCESS_TIMEOUT) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"process {proc.args} did not finish; log:\n{log.read_text()}") from None


def _stop(proc: Optional[subprocess.Popen[bytes]]) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"agl store exited early:\n{log.read_text()}"
        try:
            with urllib.request.urlopen(f"{url}/v1/agl/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"agl store never became healthy:\n{log.read_text()}")


def _executions(out: Path) -> list[tuple[int, int]]:
    lines = (out / "executions.txt").read_text().split()
    return [(int(pid), int(task)) for pid, task in zip(lines[::2], lines[1::2], strict=True)]


@pytest.mark.slow
def test_external_store_with_separate_algorithm_and_runner_processes(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    port = pick_free_port()
    url = f"http://127.0.0.1:{port}"
    store_log = tmp_path / "store.log"
    store_proc = _launch(
        [sys.executable, "-m", "agentlightning.cli", "store", "--host", "127.0.0.1", "--port", str(port)],
        _clean_env(),
        store_log,
    )
    runner_proc = None
    try:
        _wait_healthy(url, store_proc, store_log)
        common = [sys.executable, str(script), "--external-store-address", url, "--out", str(tmp_path)]
        runner_log = tmp_path / "runner.log"
        runner_proc = _launch(
            [*common, "--max-rollouts", str(len(TASKS))],
            _clean_env(AGL_MANAGED_STORE="0", AGL_CURRENT_ROLE="runner"),
            runner_log,
        )
        algorithm_log = tmp_path / "algorithm.log"
        algorithm_proc = _launch(common, _clean_env(AGL_MANAGED_STORE="0", AGL_CURRENT_ROLE="algorithm"), algorithm_log)

        assert _finish(algorithm_proc, algorithm_log) == 0, algorithm_log.read_text()
        assert _finish(runner_proc, runner_log) == 0, runner_log.read_text()
        result = json.loads((tmp_path / "algorithm.json").read_text())
        assert result["statuses"] == ["succeeded"] * len(TASKS)
        executions = _executions(tmp_path)
        assert sorted(task for _, task in executions) == TASKS
        # The one runner process ran every rollout in its own main process.
        assert {pid for pid, _ in executions} == {runner_proc.pid}
    finally:
        _stop(runner_proc)
        _stop(store_proc)
    assert store_proc.returncode is not None


@pytest.mark.slow
def test_algorithm_role_serves_and_runner_role_spawns_workers(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(TRAIN_SCRIPT)
    port = str(pick_free_port())
    runner_log = tmp_path / "runner.log"
    algorithm_log = tmp_path / "algorithm.log"
    common = [sys.executable, str(script), "--out", str(tmp_path)]
    # Runners first: they wait for the algorithm machine's server to come up.
    runner_proc = _launch(
        [*common, "--n-runners", "2", "--max-rollouts", "2"],
        _clean_env(AGL_SERVER_HOST="127.0.0.1", AGL_SERVER_PORT=port, AGL_CURRENT_ROLE="runner"),
        runner_log,
    )
    algorithm_proc = None
    try:
        algorithm_proc = _launch(
            common,
            _clean_env(AGL_SERVER_HOST="0.0.0.0", AGL_SERVER_PORT=port, AGL_CURRENT_ROLE="algorithm"),
            algorithm_log,
        )
        assert _finish(algorithm_proc, algorithm_log) == 0, algorithm_log.read_text()
        # Each of the two runner workers stops after two rollouts, so the runner side ends by itself.
        assert _finish(runner_proc, runner_log) == 0, runner_log.read_text()
    finally:
        _stop(algorithm_proc)
        _stop(runner_proc)

    result = json.loads((tmp_path / "algorithm.json").read_text())
    assert result["statuses"] == ["succeeded"] * len(TASKS)
    executions = _executions(tmp_path)
    assert sorted(task for _, task in executions) == TASKS
    worker_pids = {pid for pid, _ in executions}
    assert len(worker_pids) == 2
    assert runner_proc.pid not in worker_pids and result["pid"] not in worker_pids
