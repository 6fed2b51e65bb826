"""@llm_rollout, @prompt_rollout and @rollout: signature checks, resource injection, proxy stripping."""

from __future__ import annotations

import inspect
import logging
from typing import Any, Optional

import pytest

from agentlightning.litagent import LitAgent, llm_rollout, prompt_rollout, rollout
from agentlightning.litagent.decorator import FunctionalLitAgent
from agentlightning.types import LLM, Attempt, AttemptedRollout, NamedResources, PromptTemplate, ProxyLLM, Rollout

ATTEMPTED = AttemptedRollout(
    rollout_id="ro-abc",
    input="task",
    start_time=0.0,
    attempt=Attempt(rollout_id="ro-abc", attempt_id="at-123", sequence_id=1, start_time=0.0),
)
PLAIN_ROLLOUT = Rollout(rollout_id="ro-abc", input="task", start_time=0.0)
LLM_A = LLM(endpoint="http://a/v1", model="model-a")
LLM_B = LLM(endpoint="http://b/v1", model="model-b")
PROMPT = PromptTemplate(template="Q: {q}", engine="f-string")


# ---- signature checks ----


def test_llm_rollout_accepts_task_llm_and_optional_rollout() -> None:
    @llm_rollout
    def agent(task: str, llm: LLM, rollout: Rollout) -> float:
        return 1.0

    assert isinstance(agent, FunctionalLitAgent)
    assert isinstance(agent, LitAgent)


def test_llm_rollout_rejects_wrong_first_parameter() -> None:
    def bad(question: str, llm: LLM) -> None: ...

    with pytest.raises(
        ValueError, match=r"@llm_rollout cannot wrap .*bad: its first parameter is 'question'.*\(task, llm"
    ):
        llm_rollout(bad)


def test_llm_rollout_rejects_missing_llm_parameter() -> None:
    def no_llm(task: str, prompt_template: PromptTemplate) -> None: ...

    with pytest.raises(ValueError, match=r"no_llm: it has no parameter named 'llm'"):
        llm_rollout(no_llm)


def test_llm_rollout_rejects_single_parameter() -> None:
    def lonely(task: str) -> None: ...

    with pytest.raises(ValueError, match=r"lonely: it takes 1 parameter"):
        llm_rollout(lonely)


def test_decorator_rejects_parameters_it_cannot_inject() -> None:
    def extra(task: str, llm: LLM, temperature: float) -> None: ...

    with pytest.raises(ValueError, match=r"parameter 'temperature' has no default and cannot be injected"):
        llm_rollout(extra)

    def with_default(task: str, llm: LLM, temperature: float = 0.0) -> float:
        return temperature

    assert llm_rollout(with_default).rollout("t", {"m": LLM_A}, ATTEMPTED) == 0.0


def test_prompt_rollout_rejects_missing_prompt_template() -> None:
    def needs_llm(task: str, llm: LLM) -> None: ...

    with pytest.raises(ValueError, match=r"@prompt_rollout cannot wrap .*needs_llm.*'prompt_template'"):
        prompt_rollout(needs_llm)


def test_rollout_picks_the_matching_pattern_or_explains_both() -> None:
    @rollout
    def with_llm(task: str, llm: LLM) -> None: ...

    @rollout
    def with_prompt(task: str, prompt_template: PromptTemplate) -> None: ...

    assert isinstance(with_llm, FunctionalLitAgent) and isinstance(with_prompt, FunctionalLitAgent)

    def neither(task: str, tools: list[str]) -> None: ...

    with pytest.raises(
        NotImplementedError, match=r"@rollout cannot wrap .*neither.*\(task, llm.*\(task, prompt_template"
    ):
        rollout(neither)


def test_decorators_work_with_and_without_arguments() -> None:
    def fn(task: str, llm: LLM) -> None: ...

    for decorated in (llm_rollout(fn), llm_rollout()(fn), llm_rollout(strip_proxy=False)(fn), rollout()(fn)):
        assert isinstance(decorated, FunctionalLitAgent)


# ---- injection ----


def test_llm_is_the_first_llm_resource_and_extra_ones_warn(caplog: pytest.LogCaptureFixture) -> None:
    seen: dict[str, Any] = {}

    @llm_rollout
    def agent(task: str, llm: LLM) -> float:
        seen["llm"] = llm
        return 0.5

    with caplog.at_level(logging.WARNING):
        assert agent.rollout("t", {"prompt": PROMPT, "first": LLM_A, "second": LLM_B}, ATTEMPTED) == 0.5
    assert seen["llm"] is LLM_A
    assert "'first', 'second'" in caplog.text


def test_prompt_template_llm_and_rollout_injected_by_name() -> None:
    seen: dict[str, Any] = {}

    @prompt_rollout
    def agent(task: str, prompt_template: PromptTemplate, llm: LLM, rollout: Rollout) -> None:
        seen.update(task=task, prompt_template=prompt_template, llm=llm, rollout=rollout)

    agent.training_rollout("the task", {"llm": LLM_A, "prompt": PROMPT}, ATTEMPTED)
    assert seen == {"task": "the task", "prompt_template": PROMPT, "llm": LLM_A, "rollout": ATTEMPTED}


def test_rollout_parameter_is_optional() -> None:
    @prompt_rollout
    def agent(task: str, prompt_template: PromptTemplate) -> str:
        return prompt_template.format(q=task)

    assert agent.rollout("why?", {"p": PROMPT}, ATTEMPTED) == "Q: why?"


def test_missing_resource_names_what_is_missing_and_what_was_given() -> None:
    @llm_rollout
    def needs_llm(task: str, llm: LLM) -> None: ...

    with pytest.raises(
        ValueError, match=r"needs_llm needs a LLM resource for its 'llm'.*given: 'main_prompt' \(prompt_template\)"
    ):
        needs_llm.rollout("t", {"main_prompt": PROMPT}, ATTEMPTED)

    @prompt_rollout
    def needs_prompt(task: str, prompt_template: PromptTemplate) -> None: ...

    with pytest.raises(ValueError, match=r"needs a PromptTemplate resource.*given: none"):
        needs_prompt.rollout("t", {}, ATTEMPTED)


def test_proxy_llm_is_routed_to_the_attempt() -> None:
    proxy = ProxyLLM(endpoint="http://proxy:4000/v1", model="policy", api_key="k", sampling_parameters={"t": 1})
    seen: dict[str, Any] = {}

    @llm_rollout
    def agent(task: str, llm: LLM) -> None:
        seen["llm"] = llm

    agent.rollout("t", {"proxy": proxy}, ATTEMPTED)
    routed = seen["llm"]
    assert type(routed) is LLM
    assert routed.endpoint == "http://proxy:4000/rollout/ro-abc/attempt/at-123/v1"
    assert (routed.model, routed.api_key, routed.sampling_parameters) == ("policy", "k", {"t": 1})


def test_strip_proxy_false_passes_the_proxy_through() -> None:
    proxy = ProxyLLM(endpoint="http://proxy:4000/v1", model="policy")
    seen: dict[str, Any] = {}

    @llm_rollout(strip_proxy=False)
    def agent(task: str, llm: LLM) -> None:
        seen["llm"] = llm

    agent.rollout("t", {"proxy": proxy}, PLAIN_ROLLOUT)
    assert seen["llm"] is proxy


def test_proxy_needs_an_attempted_rollout() -> None:
    @llm_rollout
    def agent(task: str, llm: LLM) -> None: ...

    with pytest.raises(ValueError, match=r"cannot route ProxyLLM for rollout 'ro-abc': it has no attempt"):
        agent.rollout("t", {"p": ProxyLLM(endpoint="http://proxy/v1", model="m")}, PLAIN_ROLLOUT)


# ---- sync / async ----


async def test_async_function_makes_an_async_agent() -> None:
    @llm_rollout
    async def agent(task: str, llm: LLM) -> float:
        return 0.25

    assert agent.is_async()
    assert await agent.rollout_async("t", {"m": LLM_A}, ATTEMPTED) == 0.25
    assert await agent.training_rollout_async("t", {"m": LLM_A}, ATTEMPTED) == 0.25
    with pytest.raises(RuntimeError, match=r"agent is async; the runner must call rollout_async"):
        agent.rollout("t", {"m": LLM_A}, ATTEMPTED)


async def test_sync_function_refuses_rollout_async() -> None:
    @llm_rollout
    def agent(task: str, llm: LLM) -> float:
        return 0.25

    assert not agent.is_async()
    with pytest.raises(RuntimeError, match=r"agent is synchronous; the runner must call rollout\(\)"):
        await agent.rollout_async("t", {"m": LLM_A}, ATTEMPTED)


# ---- still callable like the function ----


async def test_agent_is_callable_like_the_original_function() -> None:
    def original(task: str, llm: LLM, rollout: Optional[Rollout] = None) -> str:
        """Answer the task."""
        return f"{task}@{llm.model}"

    agent = llm_rollout(original)
    assert agent("q", LLM_A) == "q@model-a"
    assert agent(task="q", llm=LLM_B) == "q@model-b"
    assert agent.__name__ == "original"  # pyright: ignore[reportAttributeAccessIssue]
    assert agent.__doc__ == "Answer the task."
    assert inspect.signature(agent) == inspect.signature(original)

    @prompt_rollout
    async def async_original(task: str, prompt_template: PromptTemplate) -> str:
        return prompt_template.format(q=task)

    assert await async_original("x", PROMPT) == "Q: x"


def test_resources_given_as_plain_mapping_work() -> None:
    @llm_rollout
    def agent(task: str, llm: LLM) -> str:
        return llm.model

    resources: NamedResources = {"m": LLM_A}
    assert agent.validation_rollout("t", resources, ATTEMPTED) == "model-a"
