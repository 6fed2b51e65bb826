"""`examples/langgraph_spider`: a LangGraph write -> check -> rewrite SQL agent trained as written."""

from __future__ import annotations

import asyncio
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "langgraph_spider"))
sql_graph = importlib.import_module("sql_graph")

QUESTIONS = {q["question"]: q for q in sql_graph.load_questions()}
RIGHT = QUESTIONS["List the names of singers from Norway."]
WRONG = QUESTIONS["What is the name of the oldest singer?"]


@pytest.mark.slow
def test_quick_run_writes_checks_rewrites_and_keeps_the_query() -> None:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "langgraph_spider" / "train_langgraph_sql.py"), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    rollouts = re.findall(r"^  \[val\] (.+?) -> \[(.+)\] reward=1\.0$", completed.stdout, re.M)
    assert len(rollouts) == 4
    for question, queries in rollouts:
        first, rewritten, kept = re.findall(r"[\"'](SELECT .+?)[\"'](?:, |$)", queries)
        assert "_table" in first and rewritten == kept == QUESTIONS[question]["sql"]
    assert "val exact accuracy: 1.000 over 4 questions" in completed.stdout


def sql_reply(query: str) -> str:
    return f"```sql\n{query}\n```"


def choose(prompt: str) -> str:
    """The stand-in policy: RIGHT gets a wrong table name, the gold query after the error, then keeps it;
    WRONG gets a query that runs but returns other rows, kept at once."""
    question = re.search(r"Question: (.+)", prompt)
    assert question is not None
    task = QUESTIONS[question.group(1).strip()]
    answers = re.findall(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", prompt, re.DOTALL)
    if task is WRONG:
        return sql_reply("SELECT name FROM singer ORDER BY age ASC LIMIT 1")
    if not answers:
        return sql_reply(task["sql"].replace("FROM singer", "FROM singers"))
    return sql_reply(task["sql"]) if "error:" in prompt.rsplit("<|im_start|>user", 1)[-1] else answers[-1]


@pytest.mark.train
def test_every_graph_node_call_is_one_triplet_with_its_exact_tokens_and_the_reward_of_its_rollout() -> None:
    from tests.support.policy_capture import assert_every_call_captured_once, capture

    right, wrong = asyncio.run(
        capture(sql_graph.langgraph_sql_agent, [RIGHT, WRONG], choose, sampling={"temperature": 0.0, "max_tokens": 128})
    )
    assert (right.reward, wrong.reward) == (1.0, 0.0)
    assert len(right.calls) == 3 and len(wrong.calls) == 2  # write, rewrite, rewrite (kept) / write, rewrite (kept)
    for captured in (right, wrong):
        assert_every_call_captured_once(captured)
    tokenizer = importlib.import_module("tests.support.tiny_model").tiny_tokenizer()
    assert "error: OperationalError: no such table: singers" in tokenizer.decode(right.calls[1][0])
