"""An OpenAI Agents SDK agent that answers from an MCP search server: the `examples/rag` task.

The agent is written the way the Agents SDK's docs write one: an `Agent` with instructions, an
`OpenAIChatCompletionsModel` on an `AsyncOpenAI` client pointed at the `LLM` resource's endpoint,
`ModelSettings` for sampling, and an `MCPServerStdio` (`search_server.py`, started per rollout) as its
tool source; `Runner.run` drives the search-then-answer loop. The corpus, questions and answer-F1
reward are `examples/rag`'s. The only agentlightning parts are the `@agl.rollout` decorator and the
returned reward. The SDK's own trace export (to the OpenAI platform) is turned off: agentlightning's
tracer records the model calls.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.exceptions import AgentsException
from agents.items import ToolCallItem
from agents.mcp import MCPServerStdio, MCPServerStdioParams
from openai import AsyncOpenAI

import agentlightning as agl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "rag"))
from rag_agent import DATA as RAG_DATA  # noqa: E402
from rag_agent import SYSTEM_PROMPT, answer_f1, load_jsonl  # noqa: E402

__all__ = ["search_server", "build_agent", "agents_sdk_rag_agent", "load_questions", "MAX_TURNS"]

MAX_TURNS = 3
set_tracing_disabled(True)


def load_questions(split: str) -> List[Dict[str, Any]]:
    return [q for q in load_jsonl(RAG_DATA / "questions.jsonl") if q["split"] == split]


def search_server() -> MCPServerStdio:
    """The MCP search server, as a stdio subprocess (started and stopped by `async with`)."""
    params = MCPServerStdioParams(command=sys.executable, args=[str(HERE / "search_server.py")])
    return MCPServerStdio(
        params=params, name="kestrel-search", cache_tools_list=True, client_session_timeout_seconds=60
    )


def build_agent(llm: agl.LLM, server: MCPServerStdio) -> Agent[Any]:
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "EMPTY", max_retries=0)
    sampling = llm.sampling_parameters
    return Agent(
        name="kestrel-guide",
        instructions=SYSTEM_PROMPT,
        model=OpenAIChatCompletionsModel(model=llm.model, openai_client=client),
        model_settings=ModelSettings(temperature=sampling.get("temperature"), max_tokens=sampling.get("max_tokens")),
        mcp_servers=[server],
    )


@agl.rollout
async def agents_sdk_rag_agent(task: Dict[str, Any], llm: agl.LLM) -> float:
    """One rollout: search with the MCP tool, then answer; the answer F1 is the reward."""
    async with search_server() as server:
        agent = build_agent(llm, server)
        try:
            result = await Runner.run(agent, task["question"], max_turns=MAX_TURNS)
            answer = str(result.final_output or "")
            searches = [str(item.raw_item.arguments) for item in result.new_items if isinstance(item, ToolCallItem)]  # type: ignore[union-attr]
        except AgentsException:  # max turns, or a reply the SDK cannot use: no answer
            answer, searches = "", []
    agl.emit_object({"searches": searches, "answer": answer})
    return answer_f1(answer, task["answer"])
