"""A PydanticAI agent with a calculator tool, trained by agentlightning: the `grpo_calculator` task.

The agent is written the way PydanticAI's docs write one: an `Agent` on an `OpenAIChatModel` whose
`OpenAIProvider` points at the `LLM` resource's endpoint, instructions, and a `@agent.tool_plain`
calculator. Two earlier turns (one answered from memory, one solved with the tool) go in as
`message_history`, as in `make demo`. The only agentlightning parts are the `@agl.rollout` decorator
and the returned reward: `grade` from `examples/grpo_calculator` (1.0 for the exact answer, partial
credit for a right tool call).

The model call limit (`UsageLimits(request_limit=3)`) bounds the tool loop; a run that hits it, or whose
model keeps sending malformed tool arguments, ends with the reply it has (none) and is graded as is.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List

from pydantic_ai import Agent, ModelRetry, capture_run_messages
from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import UsageLimits

import agentlightning as agl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "grpo_calculator"))
from calculator_agent import SYSTEM_PROMPT, CalcTask, Episode, grade, load_tasks, safe_eval  # noqa: E402

__all__ = ["build_agent", "pydantic_calculator_agent", "load_tasks", "EXAMPLE_HISTORY", "MAX_MODEL_REQUESTS"]

MAX_MODEL_REQUESTS = 3

EXAMPLE_HISTORY: List[ModelMessage] = [
    ModelRequest(parts=[UserPromptPart(content="What is 12 * 7?")]),
    ModelResponse(parts=[TextPart(content="84")]),
    ModelRequest(parts=[UserPromptPart(content="Compute 305 minus 118.")]),
    ModelResponse(parts=[ToolCallPart(tool_name="calculator", args={"expression": "305 - 118"}, tool_call_id="c1")]),
    ModelRequest(parts=[ToolReturnPart(tool_name="calculator", content="187", tool_call_id="c1")]),
    ModelResponse(parts=[TextPart(content="187")]),
]
"""The two worked turns of `make demo` (examples/grpo_calculator/calculator_agent.py), as PydanticAI messages."""


def build_agent(llm: agl.LLM) -> Agent[None, str]:
    """The PydanticAI agent on the policy endpoint, with its calculator tool."""
    model = OpenAIChatModel(llm.model, provider=OpenAIProvider(base_url=llm.endpoint, api_key=llm.api_key or "EMPTY"))
    agent = Agent(model, instructions=SYSTEM_PROMPT, retries=1)

    @agent.tool_plain
    def calculator(expression: str) -> str:
        """Evaluate arithmetic"""
        value = safe_eval(expression)
        if value is None:
            raise ModelRetry("use calculator with an arithmetic expression")
        return str(int(value)) if value == int(value) else f"{value:.4g}"

    return agent


def episode_of(messages: List[ModelMessage], final_text: str | None) -> Episode:
    """The tool results and final reply of one run (the messages after the shipped history)."""
    episode = Episode(final_text=final_text)
    for message in messages[len(EXAMPLE_HISTORY) :]:
        if isinstance(message, ModelResponse):
            episode.llm_calls += 1
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                episode.tool_results.append(safe_eval(str(part.content)))
    return episode


@agl.rollout
async def pydantic_calculator_agent(task: CalcTask, llm: agl.LLM) -> float:
    """One rollout: PydanticAI runs the tool loop on the published policy; the grade is the reward."""
    agent = build_agent(llm)
    sampling = llm.sampling_parameters
    settings = ModelSettings(**{k: sampling[k] for k in ("temperature", "max_tokens", "top_p") if k in sampling})  # type: ignore[typeddict-item]
    limits = UsageLimits(request_limit=MAX_MODEL_REQUESTS)
    with capture_run_messages() as messages:
        try:
            result = await agent.run(
                task["question"], message_history=EXAMPLE_HISTORY, model_settings=settings, usage_limits=limits
            )
            episode = episode_of(result.all_messages(), result.output)
        except AgentRunError:  # the call limit, or tool arguments never right: graded on what happened
            episode = episode_of(messages, "")
    agl.emit_object({"tool_results": episode.tool_results, "reply": episode.final_text})
    return grade(task, episode)
