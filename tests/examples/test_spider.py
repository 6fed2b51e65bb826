"""`examples/spider`: shipped databases, execution-match reward, and the write/check/rewrite loop end to end."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples" / "spider"))
from sql_agent import execution_match, extract_sql, load_questions, open_database, run_query, schema_text  # noqa: E402


def test_every_reference_query_returns_rows_on_its_database() -> None:
    questions = load_questions()
    assert len(questions) == 24 and {q["split"] for q in questions} == {"train", "val"}
    for q in questions:
        rows, error = run_query(q["db"], q["sql"])
        assert error is None and rows, q
        assert execution_match(q["db"], q["sql"], q["sql"]) == 1.0


def test_execution_match_compares_rows_not_text() -> None:
    assert execution_match("concerts", "SELECT count(singer_id) FROM singer", "SELECT COUNT(*) FROM singer") == 1.0
    unordered = "SELECT name FROM singer WHERE country = 'Norway'"
    assert execution_match("concerts", unordered + " ORDER BY name DESC", unordered) == 1.0  # order-free reference
    oldest = "SELECT name FROM singer ORDER BY age DESC LIMIT 1"
    assert execution_match("concerts", "SELECT name FROM singer ORDER BY age LIMIT 1", oldest) == 0.0
    assert execution_match("concerts", "SELECT nme FROM singer", unordered) == 0.0  # an error scores 0
    assert execution_match("concerts", None, unordered) == 0.0


def test_queries_run_on_a_fresh_copy_of_the_database() -> None:
    rows, error = run_query("shop", "DROP TABLE product")
    assert error is None and rows == []
    assert open_database("shop").execute("SELECT COUNT(*) FROM product").fetchone() == (6,)
    assert "CREATE TABLE purchase" in schema_text("shop") and "INSERT" not in schema_text("shop")
    with pytest.raises(ValueError, match="unknown database 'nope'"):
        run_query("nope", "SELECT 1")


def test_sql_is_taken_from_the_last_sql_block() -> None:
    assert extract_sql("first ```sql\nSELECT 1\n``` then ```sql\nSELECT 2;\n```") == "SELECT 2"
    assert extract_sql("SELECT name FROM singer") == "SELECT name FROM singer"
    assert extract_sql("I cannot answer that.") is None


def _run(*args: str) -> str:
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "spider" / "train_spider.py"), "--quick", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout


@pytest.mark.slow
def test_quick_run_rewrites_a_failing_query_then_keeps_it() -> None:
    out = _run()
    rollouts = re.findall(r"^  \[val\] .+ -> \[(.+)\] reward=1\.0$", out, flags=re.MULTILINE)
    assert len(rollouts) == 4
    for queries in rollouts:
        written, rewritten, kept = re.findall(r"['\"](SELECT .+?)['\"](?:, |$)", queries)
        assert "_table" in written and "_table" not in rewritten and kept == rewritten
    assert "val execution match: 1.000 over 4 questions" in out


@pytest.mark.slow
def test_quick_apo_round_runs_and_keeps_a_prompt_with_both_placeholders() -> None:
    out = _run("--algorithm", "apo")
    assert len(re.findall(r"^  \[train\] ", out, flags=re.MULTILINE)) >= 2
    best = re.search(r"^best prompt: '(.+)'$", out, flags=re.MULTILINE)
    assert best is not None and "{schema}" in best.group(1) and "{question}" in best.group(1)
