"""A math agent whose calculator is an MCP tool: a real MCP server process spoken to over stdio.

For every rollout the agent starts `calculator_server.py` as a subprocess, connects an MCP client
session over its stdin/stdout, lists the tools and offers them to the model as OpenAI function tools.
Each tool call the model makes goes to the MCP server (`tools/call`); its text result goes back to the
model. The rollout ends at the first reply without tool calls or after `max_turns` model calls.
Reward: 1.0 when the last number of the final reply equals the answer, else 0.0.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Dict, List, Optional

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from openai import AsyncOpenAI

import agentlightning as agl

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
SERVER_SCRIPT = HERE / "calculator_server.py"

SYSTEM_PROMPT = (
    "Solve the word problem. Call the calculate tool with an arithmetic expression to compute; do not "
    "compute in your head. When you have the result, reply with 'Answer: <number>'."
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def load_problems(split: str) -> List[Dict[str, Any]]:
    path = DATA / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@asynccontextmanager
async def calculator_session() -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with a fresh calculator server process (stopped on exit)."""
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT)])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def openai_tools(session: ClientSession) -> List[Dict[str, Any]]:
    """The MCP server's tools in the OpenAI function-tool format."""
    listed = await session.list_tools()
    return [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema},
        }
        for tool in listed.tools
    ]


async def call_tool(session: ClientSession, name: str, arguments: Optional[str]) -> str:
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return f"error: the arguments of {name} must be a JSON object, got {arguments!r}"
    if not isinstance(parsed, dict):
        return f"error: the arguments of {name} must be a JSON object, got {arguments!r}"
    result = await session.call_tool(name, parsed)
    texts = [getattr(block, "text", "") for block in getattr(result, "content", [])]
    return "\n".join(t for t in texts if t) or "error: the tool returned nothing"


def final_number(text: str) -> Optional[float]:
    numbers = _NUMBER.findall((text or "").replace(",", ""))
    return float(numbers[-1]) if numbers else None


async def solve(
    client: AsyncOpenAI, model: str, session: ClientSession, question: str, *, max_turns: int = 4, **sampling: Any
) -> Dict[str, Any]:
    """The tool loop for one problem: returns the final reply, the tool calls made and the turns used."""
    tools = await openai_tools(session)
    messages: List[Dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    calls_made: List[Dict[str, str]] = []
    for turn in range(1, max_turns + 1):
        reply = await client.chat.completions.create(model=model, messages=messages, tools=tools, **sampling)  # type: ignore[arg-type]
        message = reply.choices[0].message
        tool_calls = message.tool_calls or []
        if not tool_calls:
            return {"reply": message.content or "", "tool_calls": calls_made, "turns": turn}
        messages.append(
            {
                "role": "assistant",
                "content": message.content or "",
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }  # type: ignore[union-attr]
                    for c in tool_calls
                ],
            }
        )
        for call in tool_calls:
            output = await call_tool(session, call.function.name, call.function.arguments)  # type: ignore[union-attr]
            calls_made.append({"arguments": call.function.arguments, "output": output})  # type: ignore[union-attr]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return {"reply": "", "tool_calls": calls_made, "turns": max_turns}


class CalcAgent(agl.LitAgent[Dict[str, Any]]):
    """Trainable: the `LLM` resource (the policy) drives the MCP calculator; reward 1 for the exact answer."""

    def __init__(self, max_turns: int = 4) -> None:
        super().__init__()
        self.max_turns = max_turns

    async def rollout_async(self, task: Dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        llm = next(r for r in resources.values() if isinstance(r, agl.LLM))
        client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "EMPTY", max_retries=0)
        async with calculator_session() as session:
            result = await solve(
                client, llm.model, session, task["question"], max_turns=self.max_turns, **llm.sampling_parameters
            )
        agl.emit_object(result)
        value = final_number(result["reply"])
        return 1.0 if value is not None and abs(value - float(task["answer"])) < 1e-6 else 0.0
