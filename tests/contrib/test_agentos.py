"""Agent-OS contrib against the real `agent-os-kernel` package: gate, runner, violation spans, PolicyReward."""

from __future__ import annotations

from typing import Any

import pytest

agent_os = pytest.importorskip("agent_os", reason="needs the agentos extra (agent-os-kernel)")

import agentlightning as agl  # noqa: E402
from agentlightning.contrib.agentos import (  # noqa: E402
    PolicyViolation,
    count_violations,
    current_gate,
    sql_deny_policy,
)
from agentlightning.contrib.reward.agentos import PolicyReward  # noqa: E402
from agentlightning.contrib.runner.agentos import AgentOSRunner  # noqa: E402

QUERIES = ["SELECT name FROM singer", "DELETE FROM singer", "SELECT deleted_at FROM log", "drop table singer"]


def make_kernel() -> Any:
    return agent_os.StatelessKernel(policies={"sql": sql_deny_policy(["DROP", "DELETE"])})


class GovernedAgent(agl.LitAgent[list]):
    """Sends each query through the gate; the reward is the share of queries allowed, minus violations."""

    def __init__(self, reward: PolicyReward) -> None:
        super().__init__()
        self.reward = reward
        self.verdicts: list[bool] = []

    async def rollout_async(self, task: list, resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        gate = current_gate()
        self.verdicts = [(await gate.check("database_query", {"query": q})).allowed for q in task]
        return self.reward(1.0)


async def run_once(runner: AgentOSRunner, agent: agl.LitAgent[Any], task: Any) -> tuple[agl.Rollout, list[agl.Span]]:
    store = agl.InMemoryLightningStore()
    with runner.run_context(agent=agent, store=store):
        rollout = await runner.step(task)
    return rollout, list(await store.query_spans(rollout.rollout_id))


async def test_violations_become_spans_and_negative_rewards() -> None:
    kernel = make_kernel()
    runner = AgentOSRunner(kernel, fail_on_violation=False, emit_violations=True)
    agent = GovernedAgent(PolicyReward(kernel, penalty=0.5))
    rollout, spans = await run_once(runner, agent, QUERIES)
    assert rollout.status == "succeeded"
    assert agent.verdicts == [True, False, True, False]  # `deleted_at` is not the DELETE statement
    assert count_violations(spans) == 2
    violation = next(s for s in spans if "agentos.violation.action" in s.attributes)
    assert violation.attributes["agentos.violation.action"] == "database_query"
    assert "delete" in str(violation.attributes["agentos.violation.reason"]).lower()
    assert agl.find_final_reward(spans) == 0.0  # 1.0 - 2 * 0.5
    assert PolicyReward(kernel, penalty=0.25)(1.0, spans) == 0.5
    assert runner.last_gate is not None and runner.last_gate.checked == 4
    assert runner.last_gate.agent_id == rollout.rollout_id


async def test_fail_on_violation_fails_the_attempt() -> None:
    kernel = make_kernel()
    runner = AgentOSRunner(kernel, fail_on_violation=True)
    store = agl.InMemoryLightningStore()
    with runner.run_context(agent=GovernedAgent(PolicyReward(kernel)), store=store):
        with pytest.raises(PolicyViolation, match="denied 'database_query'"):
            await runner.step(["DROP TABLE singer"])
    [rollout] = await store.query_rollouts()
    assert rollout.status == "failed"
    assert count_violations(await store.query_spans(rollout.rollout_id)) == 1


async def test_violations_can_stay_out_of_the_trace() -> None:
    kernel = make_kernel()
    runner = AgentOSRunner(kernel, emit_violations=False)
    _, spans = await run_once(runner, GovernedAgent(PolicyReward(kernel)), QUERIES)
    assert count_violations(spans) == 0
    assert runner.last_gate is not None and len(runner.last_gate.violations) == 2


def test_bad_configuration_is_a_clear_error() -> None:
    kernel = make_kernel()
    with pytest.raises(ValueError, match=r"policies \['nope'\] are not defined by the kernel"):
        AgentOSRunner(kernel, policies=["nope"])
    with pytest.raises(TypeError, match="kernel must be an Agent-OS kernel"):
        AgentOSRunner(object())
    with pytest.raises(ValueError, match="penalty must be > 0"):
        PolicyReward(kernel, penalty=0)
    with pytest.raises(ValueError, match="keywords must be non-empty strings"):
        sql_deny_policy([])
    with pytest.raises(RuntimeError, match="no Agent-OS gate is active"):
        current_gate()
    assert PolicyReward(kernel, penalty=2.0, floor=-1.0)(1.0, []) == 1.0
