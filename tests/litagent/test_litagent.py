"""LitAgent: rollout variants, async detection, and links to trainer, runner and tracer."""

from __future__ import annotations

import gc
import pickle
import warnings
from typing import Any

import pytest

from agentlightning.litagent import LitAgent
from agentlightning.types import NamedResources, PromptTemplate, Rollout

RESOURCES: NamedResources = {"prompt": PromptTemplate(template="{q}", engine="f-string")}
ROLLOUT = Rollout(rollout_id="ro-1", input="q", start_time=0.0)


class SyncAgent(LitAgent[str]):
    def rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return float(len(task))


class AsyncAgent(LitAgent[str]):
    async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return 2.0


class SplitAgent(LitAgent[str]):
    def training_rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return 1.0

    def validation_rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return 0.0


class AsyncTrainingOnly(LitAgent[str]):
    async def training_rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        return 3.0


class Holder:
    """Stands in for a trainer or runner: anything with a `tracer` attribute."""

    def __init__(self, tracer: Any = "tracer") -> None:
        self.tracer = tracer


def test_sync_variants_default_to_rollout() -> None:
    agent = SyncAgent()
    assert agent.training_rollout("abc", RESOURCES, ROLLOUT) == 3.0
    assert agent.validation_rollout("abcd", RESOURCES, ROLLOUT) == 4.0
    assert not agent.is_async()


async def test_async_variants_default_to_rollout_async() -> None:
    agent = AsyncAgent()
    assert await agent.training_rollout_async("x", RESOURCES, ROLLOUT) == 2.0
    assert await agent.validation_rollout_async("x", RESOURCES, ROLLOUT) == 2.0
    assert agent.is_async()


def test_overriding_any_async_variant_makes_agent_async() -> None:
    assert AsyncTrainingOnly().is_async()
    assert not SplitAgent().is_async()


def test_split_agent_keeps_training_and_validation_apart() -> None:
    agent = SplitAgent()
    assert agent.training_rollout("x", RESOURCES, ROLLOUT) == 1.0
    assert agent.validation_rollout("x", RESOURCES, ROLLOUT) == 0.0


async def test_unimplemented_rollouts_raise_naming_the_class() -> None:
    class Empty(LitAgent[str]):
        pass

    with pytest.raises(NotImplementedError, match="Empty must implement rollout"):
        Empty().training_rollout("x", RESOURCES, ROLLOUT)
    with pytest.raises(NotImplementedError, match="Empty must implement rollout_async"):
        await Empty().validation_rollout_async("x", RESOURCES, ROLLOUT)


def test_trained_agents_is_deprecated() -> None:
    with pytest.warns(DeprecationWarning, match="agent_match"):
        agent = SyncAgent(trained_agents="writer")
    assert agent.trained_agents == "writer"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SyncAgent()


def test_trainer_link_is_weak_and_errors_are_clear() -> None:
    agent = SyncAgent()
    with pytest.raises(ValueError, match="no trainer is set"):
        agent.get_trainer()
    trainer = Holder(tracer="trainer-tracer")
    agent.set_trainer(trainer)
    assert agent.trainer is trainer
    assert agent.tracer == "trainer-tracer"
    del trainer
    gc.collect()
    with pytest.raises(ValueError, match="garbage-collected"):
        agent.get_trainer()


def test_runner_link_and_tracer_fallback() -> None:
    agent = SyncAgent()
    with pytest.raises(ValueError, match="no runner is set"):
        agent.get_runner()
    with pytest.raises(ValueError, match="has no tracer"):
        agent.get_tracer()
    runner = Holder(tracer="runner-tracer")
    agent.set_runner(runner)  # type: ignore[arg-type]
    assert agent.runner is runner
    assert agent.get_tracer() == "runner-tracer"


def test_trainer_tracer_wins_over_runner_tracer() -> None:
    agent = SyncAgent()
    trainer, runner = Holder("trainer-tracer"), Holder("runner-tracer")
    agent.set_runner(runner)  # type: ignore[arg-type]
    agent.set_trainer(trainer)
    assert agent.get_tracer() == "trainer-tracer"


def test_legacy_hooks_are_noops() -> None:
    agent = SyncAgent()
    assert agent.on_rollout_start("task", None, None) is None
    assert agent.on_rollout_end("task", None, None, None) is None


def test_agent_pickles_without_its_links() -> None:
    agent = SyncAgent()
    runner = Holder()
    agent.set_runner(runner)  # type: ignore[arg-type]
    copy = pickle.loads(pickle.dumps(agent))
    assert copy.training_rollout("ab", RESOURCES, ROLLOUT) == 2.0
    with pytest.raises(ValueError, match="no runner is set"):
        copy.get_runner()
