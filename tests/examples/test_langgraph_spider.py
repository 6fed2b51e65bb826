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
sql_tasks = importlib.import_module("sql_tasks")

QUESTIONS = {q["question"]: q for q in sql_graph.load_questions()}
RIGHT = QUESTIONS["How many planets are there?"]
WRONG = QUESTIONS["What is the lowest number of moons of any planet?"]


def test_held_out_tables_are_never_trained_on_and_every_reference_query_runs() -> None:
    questions = list(QUESTIONS.values())
    train = {q["table"] for q in questions if q["split"] == "train"}
    held_out = {q["table"] for q in questions if q["split"] == "val"}
    assert len(train) == 12 and len(held_out) == 4 and not train & held_out
    asked = {
        split: {c for q in questions if q["split"] == split for c in re.findall(r"\((\w+)\)", q["sql"])}
        for split in ("train", "val")
    }
    assert not asked["train"] & asked["val"]  # nor a number column: MAX/MIN/SUM of held-out columns never trained on
    for table in train | held_out:  # the four families' answers differ, so no wrong family matches by chance
        answers = [sql_tasks.run_query(q["sql"])[0] for q in questions if q["table"] == table]
        assert len(answers) == 4 and len({repr(a) for a in answers}) == 4
    assert sql_tasks.execution_match("SELECT count(name) FROM planet", RIGHT["sql"]) == 1.0
    assert sql_tasks.execution_match("SELECT MAX(planet_id) FROM planet", RIGHT["sql"]) == 0.0
    assert sql_tasks.execution_match("SELECT 1; DROP TABLE planet", RIGHT["sql"]) == 0.0


@pytest.mark.slow
def test_quick_run_writes_checks_and_rewrites_the_query() -> None:
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
        first, rewritten = re.findall(r"[\"'](SELECT .+?)[\"'](?:, |$)", queries)
        assert "_table" in first and rewritten == QUESTIONS[question]["sql"]
    assert "val exact accuracy: 1.000 over 4 questions" in completed.stdout


def sql_reply(query: str) -> str:
    return f"```sql\n{query}\n```"


def choose(prompt: str) -> str:
    """The stand-in policy: RIGHT gets a wrong table name, then the gold query after the error;
    WRONG gets a query that runs but returns other rows, kept at once."""
    question = re.search(r"Question: (.+)", prompt)
    assert question is not None
    task = QUESTIONS[question.group(1).strip()]
    answers = re.findall(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", prompt, re.DOTALL)
    if task is WRONG:
        return sql_reply("SELECT MAX(moons) FROM planet")
    if not answers:
        return sql_reply(task["sql"].replace("FROM planet", "FROM planets"))
    return sql_reply(task["sql"]) if "error:" in prompt.rsplit("<|im_start|>user", 1)[-1] else answers[-1]


@pytest.mark.train
def test_every_graph_node_call_is_one_triplet_with_its_exact_tokens_and_the_reward_of_its_rollout() -> None:
    from tests.support.policy_capture import assert_every_call_captured_once, capture

    right, wrong = asyncio.run(
        capture(sql_graph.langgraph_sql_agent, [RIGHT, WRONG], choose, sampling={"temperature": 0.0, "max_tokens": 128})
    )
    assert (right.reward, wrong.reward) == (1.0, 0.0)
    assert len(right.calls) == 2 and len(wrong.calls) == 2  # write, rewrite (fixed) / write, rewrite (kept)
    for captured in (right, wrong):
        assert_every_call_captured_once(captured)
    tokenizer = importlib.import_module("tests.support.tiny_model").tiny_tokenizer()
    assert "error: OperationalError: no such table: planets" in tokenizer.decode(right.calls[1][0])
