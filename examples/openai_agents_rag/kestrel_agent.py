"""An OpenAI Agents SDK agent that answers from an MCP search server: a rag task sized for a 135M model.

The agent is written the way the Agents SDK's docs write one: an `Agent` with instructions, an
`OpenAIChatCompletionsModel` on an `AsyncOpenAI` client pointed at the `LLM` resource's endpoint,
`ModelSettings` for sampling, and an MCP tool server (`search_server.py`) reached as
`MCPServerStreamableHttp`; `Runner.run` drives the search-then-answer loop, with one worked turn (a
question, its `search` call, the server's passage, the answer) before the question, as input items. The
server is one process per Python process (a runner), started on first use, not one per rollout: starting
it (Python, the mcp package, bm25s and its index) costs seconds of CPU, a connection over HTTP 0.1 s.

The instructions and the answer-F1 reward are `examples/rag`'s; the corpus (`data/`) is sized for a 135M
model: 52 one-sentence passages, each islander's boat and cottage, and one question family ("What is the
name of <islander>'s boat?") whose answers cannot be guessed, so only a search finds them. The worked turn
is of the other family (a cottage), so the agent has to carry the habit of searching over to the boat
questions instead of copying the worked answer. The 8 held-out questions ask about islanders no training
question names. The only agentlightning parts are the `@agl.rollout` decorator and the returned reward. The
SDK's own trace export (to the OpenAI platform) is turned off: agentlightning's tracer records the model calls.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, TResponseInputItem, set_tracing_disabled
from agents.exceptions import AgentsException
from agents.items import ToolCallItem
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI

import agentlightning as agl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "rag"))
from rag_agent import SYSTEM_PROMPT, answer_f1, load_jsonl  # noqa: E402

__all__ = [
    "search_server",
    "search_server_url",
    "build_agent",
    "agents_sdk_rag_agent",
    "load_questions",
    "MAX_TURNS",
    "WORKED_TURNS",
]

DATA = HERE / "data"
MAX_TURNS = 3
set_tracing_disabled(True)
_server_lock = threading.Lock()
_server_url: Optional[str] = None


WORKED_TURNS: List[TResponseInputItem] = [
    {"role": "user", "content": "What is the name of Brodie Vane's cottage?"},
    {"type": "function_call", "call_id": "w1", "name": "search", "arguments": '{"query": "Brodie Vane cottage"}'},
    {
        "type": "function_call_output",
        "call_id": "w1",
        "output": "[home-gull-rest] Brodie Vane lives on Kestrel Isle in a cottage called Gull Rest.",
    },
    {"role": "assistant", "content": "Gull Rest"},
]
"""One solved question of another family (a cottage, not a boat; its passage is in the corpus), as `Runner.run`
input: the agent has to carry the search-then-answer habit over to the boat questions rather than copy it."""


def load_questions(split: str) -> List[Dict[str, Any]]:
    return [q for q in load_jsonl(DATA / "questions.jsonl") if q["split"] == split]


def search_server_url() -> str:
    """Where the MCP search server listens: `$KESTREL_SEARCH_URL`, else a `search_server.py --port` process of
    this Python process, started on first use (one per runner, not one per rollout) and stopped at exit."""
    global _server_url
    with _server_lock:
        if _server_url is None:
            _server_url = os.environ.get("KESTREL_SEARCH_URL") or _start_search_server()
        return _server_url


def _start_search_server() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # stdin is a pipe the server watches: it exits when this process does, however that happens
    process = subprocess.Popen(
        [sys.executable, str(HERE / "search_server.py"), "--port", str(port)], stdin=subprocess.PIPE
    )
    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and process.terminate())  # not from a forked child
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"the MCP search server did not start (exit code {process.poll()})")


def search_server() -> MCPServerStreamableHttp:
    """The MCP search server, reached over streamable HTTP (connected and closed by `async with`)."""
    return MCPServerStreamableHttp(
        params={"url": search_server_url(), "timeout": 60},
        name="kestrel-search",
        cache_tools_list=True,
        client_session_timeout_seconds=60,
    )


def build_agent(llm: agl.LLM, server: MCPServerStreamableHttp) -> Agent[Any]:
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
