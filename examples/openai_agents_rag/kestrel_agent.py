"""An OpenAI Agents SDK agent that answers from an MCP search server: a rag task sized for a 135M model.

The agent is written the way the Agents SDK's docs write one: an `Agent` with instructions, an
`OpenAIChatCompletionsModel` on an `AsyncOpenAI` client pointed at the `LLM` resource's endpoint,
`ModelSettings` for sampling, and an `MCPServerStdio` (`search_server.py`, started per rollout) as its
tool source; `Runner.run` drives the search-then-answer loop, with two worked turns (a question, its
`search` call, the server's passage, the answer) before the question, as input items. The instructions
and the answer-F1 reward are `examples/rag`'s; the corpus (`data/`) is sized for a 135M model: 26
one-sentence passages, each naming an islander's boat, and one question family ("What is the name of
<islander>'s boat?") whose answers cannot be guessed, so only a search finds them. The 8 held-out
questions ask about islanders no training question names. The only agentlightning parts are the
`@agl.rollout` decorator and the returned reward. The SDK's own trace export (to the OpenAI platform) is turned off: agentlightning's
tracer records the model calls.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, TResponseInputItem, set_tracing_disabled
from agents.exceptions import AgentsException
from agents.items import ToolCallItem
from agents.mcp import MCPServerStdio, MCPServerStdioParams
from openai import AsyncOpenAI

import agentlightning as agl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "rag"))
from rag_agent import SYSTEM_PROMPT, answer_f1, load_jsonl  # noqa: E402

__all__ = ["search_server", "build_agent", "agents_sdk_rag_agent", "load_questions", "MAX_TURNS", "WORKED_TURNS"]

DATA = HERE / "data"
MAX_TURNS = 3
set_tracing_disabled(True)


def _worked_turn(number: int, islander: str, boat: str) -> List[TResponseInputItem]:
    passage = f"[boat-{boat.lower().replace(' ', '-')}] {islander} fishes from Kestrel Isle in a boat named the {boat}."
    return [
        {"role": "user", "content": f"What is the name of {islander}'s boat?"},
        {
            "type": "function_call",
            "call_id": f"w{number}",
            "name": "search",
            "arguments": f'{{"query": "{islander} boat"}}',
        },
        {"type": "function_call_output", "call_id": f"w{number}", "output": passage},
        {"role": "assistant", "content": boat},
    ]


WORKED_TURNS: List[TResponseInputItem] = [
    *_worked_turn(1, "Brodie Vane", "Lucky Minnow"),
    *_worked_turn(2, "Greta Sallow", "Tidal Rose"),
]
"""Two solved questions (their passages are in the corpus; no question asks about them), as `Runner.run` input."""


def load_questions(split: str) -> List[Dict[str, Any]]:
    return [q for q in load_jsonl(DATA / "questions.jsonl") if q["split"] == split]


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
            question: TResponseInputItem = {"role": "user", "content": task["question"]}
            result = await Runner.run(agent, [*WORKED_TURNS, question], max_turns=MAX_TURNS)
            answer = str(result.final_output or "")
            searches = [str(item.raw_item.arguments) for item in result.new_items if isinstance(item, ToolCallItem)]  # type: ignore[union-attr]
        except AgentsException:  # max turns, or a reply the SDK cannot use: no answer
            answer, searches = "", []
    agl.emit_object({"searches": searches, "answer": answer})
    return answer_f1(answer, task["answer"])
