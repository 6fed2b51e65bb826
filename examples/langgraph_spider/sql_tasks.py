"""The LangGraph example's text-to-SQL task, sized for a 135M model: one small table per question.

16 one-table SQLite databases ship as one SQL script (`data/tables.sql`; every query runs on a fresh
in-memory copy). `data/questions.jsonl` asks four question families of each table: how many rows
(`COUNT(*)`), and the highest, lowest and total value of its number column (`MAX`, `MIN`, `SUM`). The 12
training tables (48 questions) and the 4 held-out tables (16 questions: planets, ships, mountains, dogs)
share no table and no number column, so held-out accuracy measures the question families learnt, never a
query seen in training. The prompt shows only the question's table. The reward is `examples/spider`'s
execution match: the final query's rows must equal the reference query's rows.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

DATA = Path(__file__).resolve().parent / "data"
MAX_SHOWN_ROWS = 5

__all__ = ["load_questions", "schema_text", "run_query", "execution_match", "describe_outcome"]


def load_questions(path: Path = DATA / "questions.jsonl") -> List[Dict[str, Any]]:
    """Every question: `id`, `table`, `family`, `question`, the reference `sql` and its `split`."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@cache
def database_script() -> str:
    return (DATA / "tables.sql").read_text(encoding="utf-8")


def schema_text(table: str) -> str:
    """The CREATE TABLE statement of `table` (the only schema the prompt shows)."""
    for line in database_script().splitlines():
        if line.startswith(f"CREATE TABLE {table} "):
            return line
    raise ValueError(f"unknown table {table!r} in {DATA / 'tables.sql'}")


def run_query(sql: str) -> Tuple[Optional[List[Tuple[Any, ...]]], Optional[str]]:
    """(rows, None) or (None, error message), on a fresh in-memory copy of the tables."""
    connection = sqlite3.connect(":memory:")
    try:
        connection.executescript(database_script())
        return [tuple(row) for row in connection.execute(sql).fetchall()], None
    except (sqlite3.Error, sqlite3.Warning) as exc:  # Warning: more than one statement
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        connection.close()


def _normalised(rows: Sequence[Tuple[Any, ...]]) -> Counter[Tuple[Any, ...]]:
    return Counter(tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows)


def execution_match(predicted: Optional[str], reference: str) -> float:
    """1.0 when the predicted query returns the reference query's rows (as a multiset), else 0.0."""
    if not predicted:
        return 0.0
    expected, reference_error = run_query(reference)
    if reference_error is not None or expected is None:
        raise ValueError(f"the reference query fails: {reference_error}")
    got, error = run_query(predicted)
    if error is not None or got is None:
        return 0.0
    return float(_normalised(got) == _normalised(expected))


def describe_outcome(sql: Optional[str]) -> str:
    """What the check node shows the model: the rows (at most 5), the SQLite error, or that none was found."""
    if sql is None:
        return "no SQL query found in your reply"
    rows, error = run_query(sql)
    if error is not None or rows is None:
        return f"error: {error}"
    if not rows:
        return "no rows"
    shown = "\n".join(str(row) for row in rows[:MAX_SHOWN_ROWS])
    more = f"\n... ({len(rows)} rows in total)" if len(rows) > MAX_SHOWN_ROWS else ""
    return shown + more
