"""The Agent-OS contrib against the real `agent-os-kernel` package: a SQLite tool governed by a KernelSpace."""

from __future__ import annotations

import asyncio
import copy
import inspect
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest
from agent_os import KernelSpace, PolicyEngine

from agentlightning.contrib.agentos import AgentOSSession, violations_from_spans
from agentlightning.contrib.reward.agentos import PolicyReward
from agentlightning.contrib.runner.agentos import (
    AgentOSRunner,
    PolicyViolationError,
    ToolCallResult,
    current_session,
)
from agentlightning.emitter import find_final_reward
from agentlightning.litagent import LitAgent
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.otel import OtelTracer

AGENT_ID = "sql-agent"


class _FunctionAgent(LitAgent[Any]):
    """A LitAgent around `fn(task)` (async or sync), as simple agents under test."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        super().__init__()
        self.fn = fn

    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def rollout(self, task: Any, resources: Any, rollout: Any) -> Any:
        return self.fn(task)

    async def rollout_async(self, task: Any, resources: Any, rollout: Any) -> Any:
        return await self.fn(task)


def as_agent(fn: Callable[[Any], Any]) -> _FunctionAgent:
    return _FunctionAgent(fn)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT, qty INTEGER)")
        conn.executemany("INSERT INTO orders (item, qty) VALUES (?, ?)", [("pen", 3), ("ink", 1), ("pad", 2)])
    return path


def count_rows(db_path: Path) -> int:
    with sqlite3.connect(db_path) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM orders").fetchone()[0])


@pytest.fixture
def kernel(db_path: Path) -> KernelSpace:
    engine = PolicyEngine()
    engine.add_constraint(AGENT_ID, ["database_query", "failing_tool"])
    kernel = KernelSpace(policy_engine=engine)

    def database_query(query: str) -> list[list[Any]]:
        with sqlite3.connect(db_path) as conn:
            return [list(row) for row in conn.execute(query).fetchall()]

    def failing_tool() -> None:
        raise OSError("disk on fire")

    kernel.register_tool("database_query", database_query)
    kernel.register_tool("failing_tool", failing_tool)
    kernel.register_tool("shell", lambda command: command)  # registered, but not allowed for AGENT_ID
    return kernel


@pytest.fixture
def store() -> InMemoryLightningStore:
    return InMemoryLightningStore()


@pytest.fixture
def tracer() -> Iterator[OtelTracer]:
    yield OtelTracer(instrument_openai=False)


def make_runner(kernel: KernelSpace, tracer: OtelTracer, **kwargs: Any) -> AgentOSRunner[Any]:
    return AgentOSRunner(kernel, agent_id=AGENT_ID, tracer=tracer, poll_interval=0.05, heartbeat_interval=0, **kwargs)


@as_agent
async def sql_agent(task: dict[str, Any]) -> float:
    """Runs the task's queries in order; reward 1.0 when the last allowed query returned rows."""
    session = current_session()
    last: ToolCallResult | None = None
    for query in task["queries"]:
        result = await session.call_tool("database_query", query=query)
        if result.allowed:
            last = result
    return 1.0 if last is not None and last.ok and last.value else 0.0


async def test_allowed_query_runs_and_destructive_ones_are_refused_not_run(
    kernel: KernelSpace, tracer: OtelTracer, store: InMemoryLightningStore, db_path: Path
) -> None:
    runner = make_runner(kernel, tracer)
    with runner.run_context(agent=sql_agent, store=store):
        task = {"queries": ["DELETE FROM orders", "DROP TABLE orders", "SELECT item FROM orders WHERE qty > 1"]}
        result = await runner.step(task)
    assert result.status == "succeeded"
    assert count_rows(db_path) == 3  # neither DELETE nor DROP ran
    spans = await store.query_spans(result.rollout_id)
    violations = violations_from_spans(spans)
    assert [v.arguments["query"] for v in violations] == ["DELETE FROM orders", "DROP TABLE orders"]
    assert all(v.tool == "database_query" and v.agent_id == AGENT_ID for v in violations)
    assert all(v.rollout_id == result.rollout_id for v in violations)
    # The policy engine's own reason, not just the kernel's "SYS_EXEC not allowed".
    assert ["Destructive SQL blocked" in v.reason for v in violations] == [True, True]
    assert "DELETE" in violations[0].reason and "DROP" in violations[1].reason
    # After each refusal the agent got a fresh kernel context: the SELECT still ran and earned the reward.
    assert find_final_reward(spans) == 1.0
    # The runner unregisters its agent id after the rollout.
    assert AGENT_ID not in kernel._agents  # pyright: ignore[reportPrivateUsage]


async def test_fail_on_violation_fails_the_rollout(
    kernel: KernelSpace, tracer: OtelTracer, store: InMemoryLightningStore, db_path: Path
) -> None:
    runner = make_runner(kernel, tracer, fail_on_violation=True)
    with runner.run_context(agent=sql_agent, store=store):
        with pytest.raises(PolicyViolationError, match="refused tool 'database_query'") as info:
            await runner.step({"queries": ["SELECT 1", "DELETE FROM orders"]})
    assert info.value.violation.arguments == {"query": "DELETE FROM orders"}
    assert count_rows(db_path) == 3
    (rollout_row,) = await store.query_rollouts()
    assert rollout_row.status == "failed"
    spans = await store.query_spans(rollout_row.rollout_id)
    assert len(violations_from_spans(spans)) == 1
    assert any(s.name == "agentlightning.exception" for s in spans)


async def test_reward_fn_combines_task_reward_and_violations(
    kernel: KernelSpace, tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    runner = make_runner(kernel, tracer, reward_fn=PolicyReward(kernel, penalty=0.75))
    with runner.run_context(agent=sql_agent, store=store):
        clean = await runner.step({"queries": ["SELECT * FROM orders"]})
        dirty = await runner.step({"queries": ["DELETE FROM orders", "DROP TABLE orders", "SELECT * FROM orders"]})
    assert find_final_reward(await store.query_spans(clean.rollout_id)) == 1.0
    assert find_final_reward(await store.query_spans(dirty.rollout_id)) == pytest.approx(1.0 - 2 * 0.75)


async def test_policy_reward_from_spans_and_capped_penalty(
    kernel: KernelSpace, tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    runner = make_runner(kernel, tracer)  # no reward_fn: the stored reward is the task reward
    with runner.run_context(agent=sql_agent, store=store):
        result = await runner.step({"queries": ["DELETE FROM orders", "DROP TABLE orders", "SELECT 1"]})
    spans = await store.query_spans(result.rollout_id)
    assert PolicyReward(kernel).from_spans(spans) == pytest.approx(1.0 - 2.0)
    assert PolicyReward(kernel, penalty=1.0, max_penalty=0.5).from_spans(spans) == pytest.approx(0.5)
    assert PolicyReward(kernel).from_spans(spans, task_reward=0.0) == pytest.approx(-2.0)
    assert PolicyReward(kernel).from_spans([]) is None


async def test_policy_reward_reads_the_current_rollout_inside_the_agent(
    kernel: KernelSpace, tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    reward = PolicyReward(kernel, penalty=0.5)
    seen: list[float] = []

    @as_agent
    async def agent(task: str) -> float:
        await current_session().call_tool("database_query", query=task)
        seen.append(reward(1.0))
        return seen[-1]

    runner = make_runner(kernel, tracer)
    with runner.run_context(agent=agent, store=store):
        await runner.step("DELETE FROM orders")
        await runner.step("SELECT 1")
    assert seen == [0.5, 1.0]  # the second rollout starts with no violations


async def test_tool_outside_the_allow_list_is_a_violation_and_tool_errors_are_not(
    kernel: KernelSpace, tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    results: list[ToolCallResult] = []

    @as_agent
    async def agent(task: str) -> None:
        session = current_session()
        results.append(await session.call_tool("shell", command="ls"))
        results.append(await session.call_tool("failing_tool"))

    runner = make_runner(kernel, tracer)
    with runner.run_context(agent=agent, store=store):
        outcome = await runner.step("x")
    assert outcome.status == "succeeded"
    shell, failing = results
    assert not shell.allowed and shell.violation is not None and shell.violation.tool == "shell"
    assert shell.violation.reason == f"Role {AGENT_ID} cannot use tool shell"
    assert failing.allowed and not failing.ok and failing.error is not None and "disk on fire" in failing.error
    assert len(violations_from_spans(await store.query_spans(outcome.rollout_id))) == 1


async def test_sync_agent_and_emit_violations_off(
    kernel: KernelSpace, tracer: OtelTracer, store: InMemoryLightningStore, db_path: Path
) -> None:
    @as_agent
    def agent(task: str) -> float:
        session = current_session()
        refused = session.call_tool_sync("database_query", query="DELETE FROM orders")
        rows = session.call_tool_sync("database_query", query="SELECT COUNT(*) FROM orders")
        return float(rows.value[0][0]) - (0 if refused.allowed else 10)

    runner = make_runner(kernel, tracer, emit_violations=False)
    with runner.run_context(agent=agent, store=store):
        result = await runner.step("x")
    spans = await store.query_spans(result.rollout_id)
    assert find_final_reward(spans) == 3.0 - 10
    assert violations_from_spans(spans) == []
    assert count_rows(db_path) == 3


async def test_runner_copies_sharing_a_kernel_take_turns(
    kernel: KernelSpace, tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    active: list[int] = []
    overlap: list[bool] = []

    @as_agent
    async def agent(task: str) -> float:
        active.append(1)
        overlap.append(len(active) > 1)
        result = await current_session().call_tool("database_query", query=task)
        await asyncio.sleep(0.02)
        active.pop()
        return 0.0 if result.allowed else -1.0

    first = make_runner(kernel, tracer)
    second = copy.copy(first)
    with first.run_context(agent=agent, store=store), second.run_context(agent=agent, store=store, worker_id=1):
        rollouts = await asyncio.wait_for(
            asyncio.gather(first.step("DELETE FROM orders"), second.step("SELECT 1")), timeout=30
        )
    assert [r.status for r in rollouts] == ["succeeded", "succeeded"]
    assert overlap == [False, False]


def test_bad_arguments_are_named(kernel: KernelSpace, tracer: OtelTracer) -> None:
    with pytest.raises(TypeError, match="agent_os.KernelSpace"):
        AgentOSRunner("not a kernel", tracer=tracer)
    with pytest.raises(TypeError, match="agent_os.KernelSpace"):
        PolicyReward(object())
    with pytest.raises(ValueError, match="agent_id"):
        AgentOSRunner(kernel, agent_id="", tracer=tracer)
    with pytest.raises(TypeError, match="reward_fn"):
        AgentOSRunner(kernel, reward_fn=1.0, tracer=tracer)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="penalty"):
        PolicyReward(kernel, penalty=-1)
    with pytest.raises(ValueError, match="max_penalty"):
        PolicyReward(kernel, max_penalty=float("nan"))
    with pytest.raises(ValueError, match="task_reward"):
        PolicyReward(kernel)(float("inf"), violations=0)
    with pytest.raises(ValueError, match="violations"):
        PolicyReward(kernel)(1.0, violations=-1)
    with pytest.raises(TypeError, match="violations"):
        PolicyReward(kernel)(1.0, violations="many")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="no Agent-OS session"):
        PolicyReward(kernel)(1.0)
    with pytest.raises(RuntimeError, match="no Agent-OS session"):
        current_session()


async def test_policy_reward_refuses_another_kernels_rollout(
    kernel: KernelSpace, tracer: OtelTracer, store: InMemoryLightningStore
) -> None:
    other = PolicyReward(KernelSpace(policy_engine=PolicyEngine()))

    @as_agent
    async def agent(task: str) -> float:
        return other(1.0)

    runner = make_runner(kernel, tracer)
    with runner.run_context(agent=agent, store=store):
        with pytest.raises(RuntimeError, match="another Agent-OS kernel"):
            await runner.step("x")


async def test_session_outside_a_runner_keeps_violations_without_a_tracer(
    kernel: KernelSpace, db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session = await AgentOSSession(kernel, AGENT_ID).open()
    try:
        refused = await session.call_tool("database_query", query="DROP TABLE orders")
        counted = await session.call_tool("database_query", query="SELECT COUNT(*) FROM orders")
    finally:
        session.close()
    assert not refused.allowed and counted.value == [[3]]
    assert [v.arguments for v in session.violations] == [{"query": "DROP TABLE orders"}]
    assert "not recorded as a span" in caplog.text
    with pytest.raises(RuntimeError, match="not open"):
        await session.call_tool("database_query", query="SELECT 1")
    assert AGENT_ID not in kernel._agents  # pyright: ignore[reportPrivateUsage]


def test_importing_the_contrib_does_not_import_agent_os() -> None:
    code = (
        "import sys, agentlightning, agentlightning.contrib.runner.agentos, agentlightning.contrib.reward.agentos\n"
        "assert 'agent_os' not in sys.modules, 'agent_os imported eagerly'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
