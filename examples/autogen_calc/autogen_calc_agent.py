"""An AutoGen AgentChat agent with a calculator tool, trained by agentlightning: the `grpo_calculator` task (calc_x).

The agent is written the way AutoGen's docs write one: an `AssistantAgent` on an
`OpenAIChatCompletionClient` whose `base_url` is the `LLM` resource's endpoint (with `model_info`, as for
any model that is not OpenAI's), a `system_message`, and a Python function as its tool, run with
`agent.run(task=...)`. Two earlier turns (one answered from memory, one solved with the tool) go in as the
model context's `initial_messages`, as in `make demo`. The only agentlightning parts are the
`@agl.rollout` decorator and the returned reward: `grade` from `examples/grpo_calculator` (1.0 for the
exact answer, partial credit for a right tool call).

`max_tool_iterations=3` lets the model answer after the tool result with the tool still offered, as
`make demo`'s loop does (at most three model calls); a run whose third call is a tool call again ends with
AutoGen's tool-call summary, which is not a reply and is graded as none.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage, TextMessage, ToolCallExecutionEvent
from autogen_core import FunctionCall
from autogen_core.model_context import UnboundedChatCompletionContext
from autogen_core.models import (
    AssistantMessage,
    FunctionExecutionResult,
    FunctionExecutionResultMessage,
    LLMMessage,
    ModelFamily,
    ModelInfo,
    UserMessage,
)
from autogen_ext.models.openai import OpenAIChatCompletionClient

import agentlightning as agl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "grpo_calculator"))
from calculator_agent import SYSTEM_PROMPT, CalcTask, Episode, grade, load_tasks, safe_eval  # noqa: E402

__all__ = [
    "build_model_client",
    "build_agent",
    "autogen_calculator_agent",
    "episode_of",
    "load_tasks",
    "EXAMPLE_TURNS",
    "MAX_MODEL_CALLS",
]

MAX_MODEL_CALLS = 3
AGENT_NAME = "calculator_assistant"

MODEL_INFO = ModelInfo(
    vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False
)
"""What AutoGen needs to be told about a model it does not know by name (the policy, SmolLM2 here)."""

EXAMPLE_TURNS: List[LLMMessage] = [
    UserMessage(content="What is 12 * 7?", source="user"),
    AssistantMessage(content="84", source=AGENT_NAME),
    UserMessage(content="Compute 305 minus 118.", source="user"),
    AssistantMessage(
        content=[FunctionCall(id="call_1", name="calculator", arguments='{"expression": "305 - 118"}')],
        source=AGENT_NAME,
    ),
    FunctionExecutionResultMessage(
        content=[FunctionExecutionResult(content="187", name="calculator", call_id="call_1", is_error=False)]
    ),
    AssistantMessage(content="187", source=AGENT_NAME),
]
"""The two worked turns of `make demo` (examples/grpo_calculator/calculator_agent.py), as AutoGen messages."""


def calculator(expression: str) -> str:
    """Evaluate arithmetic"""
    value = safe_eval(expression)
    if value is None:
        raise ValueError("use calculator with an arithmetic expression")
    return str(int(value)) if value == int(value) else f"{value:.4g}"


def build_model_client(llm: agl.LLM) -> OpenAIChatCompletionClient:
    """AutoGen's OpenAI client on the policy endpoint, with the resource's sampling parameters."""
    sampling = {k: v for k, v in llm.sampling_parameters.items() if k in ("temperature", "max_tokens", "top_p")}
    return OpenAIChatCompletionClient(
        model=llm.model, base_url=llm.endpoint, api_key=llm.api_key or "EMPTY", model_info=MODEL_INFO, **sampling
    )


def build_agent(model_client: OpenAIChatCompletionClient) -> AssistantAgent:
    """The AutoGen agent with its calculator tool and the worked turns."""
    return AssistantAgent(
        name=AGENT_NAME,
        model_client=model_client,
        tools=[calculator],
        system_message=SYSTEM_PROMPT,
        model_context=UnboundedChatCompletionContext(initial_messages=list(EXAMPLE_TURNS)),
        max_tool_iterations=MAX_MODEL_CALLS,
        reflect_on_tool_use=False,
    )


def episode_of(messages: Sequence[BaseAgentEvent | BaseChatMessage]) -> Episode:
    """The tool results and final reply of one run (the task message first, then what the agent produced)."""
    episode = Episode()
    for message in messages:
        if isinstance(message, ToolCallExecutionEvent):
            episode.llm_calls += 1
            episode.tool_results.extend(None if r.is_error else safe_eval(r.content) for r in message.content)
    last = messages[-1] if messages else None
    if isinstance(last, TextMessage) and last.source == AGENT_NAME:
        episode.llm_calls += 1
        episode.final_text = last.content
    return episode


@agl.rollout
async def autogen_calculator_agent(task: CalcTask, llm: agl.LLM) -> float:
    """One rollout: AutoGen runs the tool loop on the published policy; the grade is the reward."""
    model_client = build_model_client(llm)
    try:
        result: TaskResult = await build_agent(model_client).run(task=task["question"])
    finally:
        await model_client.close()
    episode = episode_of(result.messages)
    details: Dict[str, Any] = {"tool_results": episode.tool_results, "reply": episode.final_text}
    agl.emit_object(details)
    return grade(task, episode)
