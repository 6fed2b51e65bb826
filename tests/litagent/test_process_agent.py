"""`ProcessAgent`: one process per rollout, its environment, exit status, timeouts, cancellation, class targets."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Optional

import pytest

from agentlightning.emitter import find_final_reward
from agentlightning.gateway import Gateway
from agentlightning.litagent import ProcessAgent, ProcessAgentError
from agentlightning.runner import LitAgentRunner
from agentlightning.store.sqlite import SqliteLightningStore
from agentlightning.tracer.dummy import DummyTracer
from agentlightning.types import LLM, NamedResources, Rollout

PY = sys.executable


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteLightningStore]:
    store = SqliteLightningStore(tmp_path / "process.db")
    yield store
    await store.close()


async def run_rollout(
    agent: ProcessAgent,
    store: SqliteLightningStore,
    task: Any,
    *,
    mode: str = "train",
    resources: Optional[NamedResources] = None,
) -> tuple[Rollout, Optional[BaseException]]:
    """Run one rollout of `agent` through a real runner; returns the stored rollout and the error raised."""
    runner: LitAgentRunner[Any] = LitAgentRunner(DummyTracer(), heartbeat_interval=60.0)
    runner.init(agent)
    runner.init_worker(0, store)
    error: Optional[BaseException] = None
    try:
        await runner.step(task, mode=mode, resources=resources)  # type: ignore[arg-type]
    except Exception as exc:
        error = exc
    finally:
        runner.teardown_worker(0)
        runner.teardown()
        await agent.close()
    (rollout,) = list(await store.query_rollouts())
    return rollout, error


def write_env_command(out: Path) -> list[str]:
    code = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
    return [PY, "-c", code, str(out)]


async def test_environment_carries_urls_key_and_task_fields(tmp_path: Path, store: SqliteLightningStore) -> None:
    out = tmp_path / "env.json"
    agent = ProcessAgent(
        write_env_command(out),
        env_map={"QUESTION": "question", "NUMBERS": "numbers", "META": "meta"},
        env={"FIXED": "yes"},
    )
    task = {"question": "What is 2 + 3?", "numbers": [2, 3], "meta": {"level": 1}}
    resources: NamedResources = {"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="policy-model")}
    rollout, error = await run_rollout(agent, store, task, mode="val", resources=resources)
    assert error is None and rollout.status == "succeeded"
    env = json.loads(out.read_text())
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt is not None
    rid, aid = rollout.rollout_id, attempt.attempt_id
    assert env["AGL_OPENAI_BASE_URL"].endswith(f"/proxy/rollout/{rid}/attempt/{aid}/mode/val/openai/v1")
    assert env["AGL_EVENT_URL"].endswith(f"/rollouts/{rid}/attempt/{aid}/events")
    assert env["AGL_KEY"].startswith("agl-") and env["AGL_MODE"] == "val"
    assert env["AGL_ROLLOUT_ID"] == rid and env["AGL_ATTEMPT_ID"] == aid and env["AGL_MODEL"] == "policy-model"
    assert env["QUESTION"] == "What is 2 + 3?"
    assert json.loads(env["NUMBERS"]) == [2, 3] and json.loads(env["META"]) == {"level": 1}
    assert json.loads(env["AGL_TASK"]) == task and env["FIXED"] == "yes"
    assert attempt.metadata is not None and attempt.metadata["process"]["exit_code"] == 0


async def test_non_zero_exit_fails_with_status_and_stderr_tail(store: SqliteLightningStore) -> None:
    code = "import sys; sys.stderr.write('x' * 9000 + 'the tool crashed\\n'); sys.exit(3)"
    agent = ProcessAgent([PY, "-c", code], stderr_tail_chars=200, echo_stderr=False)
    rollout, error = await run_rollout(agent, store, {"q": 1})
    assert isinstance(error, ProcessAgentError) and error.exit_code == 3 and error.reason == "exit"
    assert "status 3" in str(error) and "the tool crashed" in error.stderr_tail
    assert len(error.stderr_tail) <= 200
    assert rollout.status == "failed"
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt is not None and attempt.metadata is not None
    assert attempt.metadata["process"]["exit_code"] == 3
    assert "the tool crashed" in attempt.metadata["process"]["stderr_tail"]
    spans = list(await store.query_spans(rollout.rollout_id))
    assert [s.name for s in spans] == ["agentlightning.exception"]
    assert "the tool crashed" in json.dumps(spans[0].attributes)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def _wait_dead(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


def spawner_command(pid_file: Path) -> list[str]:
    """A process that starts a grandchild (same process group), records its pid and waits forever."""
    code = textwrap.dedent(
        """
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open(sys.argv[1], "w").write(str(child.pid))
        time.sleep(120)
        """
    )
    return [PY, "-c", code, str(pid_file)]


async def test_timeout_kills_the_whole_process_group(tmp_path: Path, store: SqliteLightningStore) -> None:
    pid_file = tmp_path / "grandchild.pid"
    agent = ProcessAgent(spawner_command(pid_file), timeout_seconds=2.0, kill_grace_seconds=0.5, echo_stderr=False)
    rollout, error = await run_rollout(agent, store, {})
    assert isinstance(error, ProcessAgentError) and error.reason == "timeout"
    assert rollout.status == "failed"
    assert await _wait_dead(int(pid_file.read_text()))
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt is not None and attempt.metadata is not None
    assert attempt.metadata["process"]["reason"] == "timeout" and attempt.metadata["process"]["exit_code"] == -9


async def test_rollout_timeout_from_the_rollout_config(store: SqliteLightningStore) -> None:
    from agentlightning.types import RolloutConfig

    agent = ProcessAgent([PY, "-c", "import time; time.sleep(60)"], kill_grace_seconds=5.0)
    gateway = Gateway(store)
    agent.gateway = gateway
    attempted = await store.start_rollout(input={}, config=RolloutConfig(timeout_seconds=0.5))
    try:
        with pytest.raises(ProcessAgentError, match="timed out after 0.5s"):
            await agent.rollout_async({}, {}, attempted)
    finally:
        await gateway.stop()


async def test_cancellation_kills_the_process_group(tmp_path: Path, store: SqliteLightningStore) -> None:
    pid_file = tmp_path / "grandchild.pid"
    gateway = Gateway(store)
    agent = ProcessAgent(spawner_command(pid_file), gateway=gateway, kill_grace_seconds=0.5)
    attempted = await store.start_rollout(input={})
    task = asyncio.ensure_future(agent.rollout_async({}, {}, attempted))
    try:
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await _wait_dead(int(pid_file.read_text()))
        attempt = await store.get_latest_attempt(attempted.rollout_id)
        assert attempt is not None and attempt.metadata is not None
        assert attempt.metadata["process"]["reason"] == "cancelled"
    finally:
        await gateway.stop()


AGENT_SOURCE = """
import os


class ScoreAgent:
    async def run(self):
        if os.environ.get("FAIL"):
            raise RuntimeError("agent class failed on purpose")
        return float(os.environ["SCORE"])
"""


async def test_agent_class_from_file_posts_the_returned_reward(tmp_path: Path, store: SqliteLightningStore) -> None:
    (tmp_path / "score_agent.py").write_text(AGENT_SOURCE)
    agent = ProcessAgent(agent_class=f"{tmp_path / 'score_agent.py'}:ScoreAgent", env_map={"SCORE": "score"})
    rollout, error = await run_rollout(agent, store, {"score": 0.25})
    assert error is None and rollout.status == "succeeded"
    spans = list(await store.query_spans(rollout.rollout_id))
    assert find_final_reward(spans) == 0.25


async def test_agent_class_from_module_and_its_failure(tmp_path: Path, store: SqliteLightningStore) -> None:
    package = tmp_path / "harness_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "agents.py").write_text(AGENT_SOURCE)
    python_path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    agent = ProcessAgent(
        agent_class="harness_pkg.agents:ScoreAgent", env={"PYTHONPATH": python_path, "FAIL": "1"}, echo_stderr=False
    )
    rollout, error = await run_rollout(agent, store, {})
    assert isinstance(error, ProcessAgentError) and error.exit_code == 1
    assert "agent class failed on purpose" in error.stderr_tail and rollout.status == "failed"


async def test_task_fields_that_cannot_be_mapped_fail_the_rollout(store: SqliteLightningStore) -> None:
    agent = ProcessAgent([PY, "-c", "pass"], env_map={"Q": "question"})
    _, error = await run_rollout(agent, store, "just a string")
    assert isinstance(error, TypeError) and "not a dict" in str(error)


async def test_missing_task_field_names_it(tmp_path: Path) -> None:
    store = SqliteLightningStore(tmp_path / "other.db")
    try:
        agent = ProcessAgent([PY, "-c", "pass"], env_map={"Q": "question"})
        _, error = await run_rollout(agent, store, {"prompt": "x"})
        assert isinstance(error, ValueError) and "'question'" in str(error) and "prompt" in str(error)
    finally:
        await store.close()


def test_constructor_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ProcessAgent()
    with pytest.raises(ValueError, match="exactly one"):
        ProcessAgent("echo", agent_class="a.b:C")
    with pytest.raises(ValueError, match="package.module:Class"):
        ProcessAgent(agent_class="no_colon_here")
    with pytest.raises(ValueError, match="does not exist"):
        ProcessAgent(agent_class=f"{tmp_path}/missing.py:Agent")
    with pytest.raises(ValueError, match="non-empty"):
        ProcessAgent([])
    with pytest.raises(ValueError, match="environment variable name"):
        ProcessAgent("echo", env_map={"BAD=NAME": "field"})
    with pytest.raises(ValueError, match="timeout_seconds"):
        ProcessAgent("echo", timeout_seconds=0)
    with pytest.raises(ValueError, match="gateway_secret"):
        ProcessAgent("echo", gateway="http://127.0.0.1:4750")
    # v1.0 names the class of an agent; given as a command it would run "file.py:Class" as a program.
    with pytest.raises(ValueError, match=r"agent_class='examples/gsm8k/gsm8k_agent\.py:GsmAgent'"):
        ProcessAgent("examples/gsm8k/gsm8k_agent.py:GsmAgent")
    with pytest.raises(ValueError, match=r"agent_class='my_pkg\.agents:Agent'"):
        ProcessAgent("my_pkg.agents:Agent")
    assert ProcessAgent("node agent.mjs --fast").argv == ["node", "agent.mjs", "--fast"]
    assert ProcessAgent("./agent.sh").argv == ["./agent.sh"]
    assert ProcessAgent(agent_class="pkg.mod:Agent").argv[1:] == [
        "-m",
        "agentlightning._process_entry",
        "pkg.mod:Agent",
    ]


async def test_pickled_copy_points_at_the_running_gateway(store: SqliteLightningStore) -> None:
    gateway = Gateway(store, secret="shared")
    await gateway.start()
    try:
        copy = pickle.loads(pickle.dumps(ProcessAgent("echo", gateway=gateway)))
        assert copy.gateway == gateway.endpoint and copy.gateway_secret == "shared"
    finally:
        await gateway.stop()
    assert pickle.loads(pickle.dumps(ProcessAgent("echo"))).gateway is None


def test_process_agent_is_exported_at_the_top_level() -> None:
    import agentlightning as agl

    assert agl.ProcessAgent is ProcessAgent


async def test_close_during_the_spawn_still_kills_the_new_process_group(
    tmp_path: Path, store: SqliteLightningStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() landing while a rollout's process is being started (not yet registered) must not miss it."""
    pid_file = tmp_path / "grandchild.pid"
    gateway = Gateway(store)
    agent = ProcessAgent(spawner_command(pid_file), gateway=gateway, echo_stderr=False)
    spawn = asyncio.create_subprocess_exec

    async def spawn_then_close(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await spawn(*args, **kwargs)
        await agent.close()  # before rollout_async gets to register the process group
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn_then_close)
    attempted = await store.start_rollout(input={})
    try:
        with pytest.raises(ProcessAgentError, match="status -9"):
            await asyncio.wait_for(agent.rollout_async({}, {}, attempted), 30)
    finally:
        await gateway.stop()


async def test_close_kills_running_process_groups(tmp_path: Path, store: SqliteLightningStore) -> None:
    pid_file = tmp_path / "grandchild.pid"
    gateway = Gateway(store)
    agent = ProcessAgent(spawner_command(pid_file), gateway=gateway, echo_stderr=False)
    attempted = await store.start_rollout(input={})
    task = asyncio.ensure_future(agent.rollout_async({}, {}, attempted))
    try:
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await agent.close()
        with pytest.raises(ProcessAgentError, match="status -9"):
            await task
        assert await _wait_dead(int(pid_file.read_text()))
    finally:
        await gateway.stop()
