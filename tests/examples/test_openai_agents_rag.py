"""`examples/openai_agents_rag`: an OpenAI Agents SDK agent with an MCP search server, trained as written."""

from __future__ import annotations

import ast
import asyncio
import importlib
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "openai_agents_rag"))
kestrel_agent = importlib.import_module("kestrel_agent")

QUESTIONS = {q["question"]: q for q in kestrel_agent.load_questions("train") + kestrel_agent.load_questions("val")}
RIGHT = QUESTIONS["What is the name of Rowan Hale's boat?"]
WRONG = QUESTIONS["What is the name of Sorcha Wilde's boat?"]


def test_held_out_islanders_are_never_trained_on_and_the_worked_turn_is_of_another_family() -> None:
    train, val = kestrel_agent.load_questions("train"), kestrel_agent.load_questions("val")
    assert (len(train), len(val)) == (16, 8)
    assert not {q["answer"] for q in train} & {q["answer"] for q in val}
    assert all(q["question"].endswith("'s boat?") for q in train + val)
    (worked,) = [str(item["content"]) for item in kestrel_agent.WORKED_TURNS if item.get("role") == "user"]
    assert worked == "What is the name of Brodie Vane's cottage?"  # a cottage: no question asks about one
    islanders = {q["question"].removeprefix("What is the name of ").removesuffix("'s boat?") for q in train + val}
    assert "Brodie Vane" not in islanders


def test_mcp_search_server_process_lists_and_runs_the_tool_over_streamable_http() -> None:
    async def talk() -> tuple[list[str], str]:
        async with kestrel_agent.search_server() as server:
            tools = await server.list_tools()
            result = await server.call_tool("search", {"query": "Rowan Hale boat"})
            return [t.name for t in tools], "".join(getattr(block, "text", "") for block in result.content)

    names, text = asyncio.run(talk())
    assert (
        names == ["search"]
        and text == f"[boat-blue-lark] Rowan Hale fishes from Kestrel Isle in a boat named the {RIGHT['answer']}."
    )
    url = kestrel_agent.search_server_url()
    assert url.startswith("http://127.0.0.1:") and asyncio.run(talk()) == (names, text)  # the same server again
    assert kestrel_agent.search_server_url() == url


@pytest.mark.slow
def test_quick_run_searches_over_mcp_then_answers() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "openai_agents_rag" / "train_agents_rag.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    rollouts = re.findall(r"^  \[val\] (.+?) searches=(\[.+\]) answer=(.+) F1=1\.0$", completed.stdout, re.M)
    assert len(rollouts) == 2
    for question, searches, answer in rollouts:
        (search,) = ast.literal_eval(searches)
        assert json.loads(search) == {"query": question} and ast.literal_eval(answer) == QUESTIONS[question]["answer"]
    assert "val exact accuracy: 1.000 over 2 questions" in completed.stdout


def choose(prompt: str) -> str:
    """The stand-in policy: search with the question, then answer (RIGHT: the reference; WRONG: a guess)."""
    from tests.support.policy_capture import tool_call_text

    last_turn = prompt.rsplit("<|im_start|>", 2)[-2]
    question = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", prompt, re.DOTALL)[-1]
    if not last_turn.startswith("tool"):
        return tool_call_text("search", json.dumps({"query": question}))
    return QUESTIONS[question]["answer"] if question == RIGHT["question"] else "I do not know."


@pytest.mark.train
def test_the_sdk_calls_through_mcp_are_triplets_with_exact_tokens_once_and_the_reward_of_their_rollout() -> None:
    from tests.support.policy_capture import assert_every_call_captured_once, capture

    right, wrong = asyncio.run(
        capture(kestrel_agent.agents_sdk_rag_agent, [RIGHT, WRONG], choose, sampling={"temperature": 0.0})
    )
    assert right.reward == 1.0 and wrong.reward == 0.0
    for captured in (right, wrong):
        assert len(captured.calls) == 2  # the search call, then the answer
        assert_every_call_captured_once(captured)
    tokenizer = importlib.import_module("tests.support.tiny_model").tiny_tokenizer()
    answer_prompt = tokenizer.decode(right.calls[1][0])
    assert answer_prompt.count('"name": "search"') == 3  # the tool schema, the worked turn's call, its own
    assert RIGHT["answer"] in answer_prompt.rsplit("<|im_start|>tool", 1)[-1]


def test_the_http_search_server_exits_when_the_process_that_started_it_goes() -> None:
    from agentlightning.utils.server_launcher import pick_free_port

    port = pick_free_port()
    script = ROOT / "examples" / "openai_agents_rag" / "search_server.py"
    process = subprocess.Popen([sys.executable, str(script), "--port", str(port)], stdin=subprocess.PIPE)
    try:
        while process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        assert process.poll() is None, "the server did not start"
        assert process.stdin is not None
        process.stdin.close()  # what the parent's exit does to the pipe
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
