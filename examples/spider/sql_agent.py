"""A text-to-SQL agent with a self-check loop, over small SQLite databases that ship as SQL scripts.

Turn 1 (write): the model sees the schema and the question and writes a query in a ```sql block.
Then, up to `max_rewrites` times (check, rewrite): the agent runs the query and shows the model the
result (or the SQLite error) and asks it to reply with the same query if it answers the question, or
with a corrected one. The loop ends when the model repeats its query or the rewrites run out, so a
rollout has 1 to `max_rewrites + 1` LLM calls: multi-turn data for RL.

Reward: execution match. The final query's rows must equal the reference query's rows (as a multiset;
in order when the reference has ORDER BY). A query that fails or returns other rows scores 0.

The prompt is a `PromptTemplate` resource with `{schema}` and `{question}` placeholders, so APO can
rewrite it; the `LLM` resource is what GRPO trains.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from openai import OpenAI

import agentlightning as agl

DATA = Path(__file__).resolve().parent / "data"
MAX_SHOWN_ROWS = 5

SEED_PROMPT = agl.PromptTemplate(
    template=(
        "You write SQLite queries.\nDatabase schema:\n{schema}\n\nQuestion: {question}\n"
        "Reply with one SQL query in a ```sql code block."
    ),
    engine="f-string",
)

CHECK_PROMPT = (
    "Running your query gave:\n{outcome}\n\nIf this answers the question, reply with the same query. "
    "Otherwise reply with a corrected query. Either way, put the query in a ```sql code block."
)

_SQL_BLOCK = re.compile(r"```(?:sql|sqlite)?\s*\n?(.*?)```", re.DOTALL | re.IGNORECASE)


def load_questions(path: Path = DATA / "questions.jsonl") -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@cache
def database_script(db: str) -> str:
    path = DATA / "databases" / f"{db}.sql"
    if not path.is_file():
        raise ValueError(f"unknown database {db!r}; expected a script at {path}")
    return path.read_text(encoding="utf-8")


def open_database(db: str) -> sqlite3.Connection:
    """A fresh in-memory copy of the database: a query (even a DROP) can never change the shipped data."""
    connection = sqlite3.connect(":memory:")
    connection.executescript(database_script(db))
    return connection


def schema_text(db: str) -> str:
    """The CREATE TABLE statements of the database, one per line."""
    return "\n".join(line for line in database_script(db).splitlines() if line.startswith("CREATE TABLE"))


def extract_sql(text: str) -> Optional[str]:
    """The query in the last ```sql block, else the text itself when it starts like a query."""
    blocks = _SQL_BLOCK.findall(text or "")
    candidate = blocks[-1] if blocks else (text or "")
    candidate = candidate.strip().rstrip(";").strip()
    return candidate if re.match(r"(?is)^\s*(select|with)\b", candidate) else None


def run_query(db: str, sql: str) -> Tuple[Optional[List[Tuple[Any, ...]]], Optional[str]]:
    """(rows, None) or (None, error message)."""
    connection = open_database(db)
    try:
        return [tuple(row) for row in connection.execute(sql).fetchall()], None
    except sqlite3.Error as exc:
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        connection.close()


def _normalised(rows: Sequence[Tuple[Any, ...]]) -> List[Tuple[Any, ...]]:
    return [tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows]


def execution_match(db: str, predicted: Optional[str], reference: str) -> float:
    """1.0 when the predicted query returns the reference query's rows, else 0.0."""
    if not predicted:
        return 0.0
    got, error = run_query(db, predicted)
    expected, reference_error = run_query(db, reference)
    if reference_error is not None or expected is None:
        raise ValueError(f"the reference query fails on {db!r}: {reference_error}")
    if error is not None or got is None:
        return 0.0
    got, expected = _normalised(got), _normalised(expected)
    if re.search(r"(?i)\border\s+by\b", reference):
        return float(got == expected)
    return float(Counter(got) == Counter(expected))


def describe_outcome(db: str, sql: Optional[str]) -> str:
    if sql is None:
        return "no SQL query found in your reply"
    rows, error = run_query(db, sql)
    if error is not None or rows is None:
        return f"error: {error}"
    if not rows:
        return "no rows"
    shown = "\n".join(str(row) for row in rows[:MAX_SHOWN_ROWS])
    more = f"\n... ({len(rows)} rows in total)" if len(rows) > MAX_SHOWN_ROWS else ""
    return shown + more


@dataclass
class SqlAttempt:
    queries: List[Optional[str]] = field(default_factory=list)

    @property
    def final(self) -> Optional[str]:
        return next((q for q in reversed(self.queries) if q), None)


def write_check_rewrite(
    client: OpenAI,
    model: str,
    prompt: str,
    db: str,
    *,
    max_rewrites: int = 2,
    **sampling: Any,
) -> SqlAttempt:
    """The multi-turn loop: write a query, show its result, let the model keep or rewrite it."""
    messages: List[Dict[str, Any]] = [{"role": "user", "content": prompt}]
    attempt = SqlAttempt()
    for turn in range(max_rewrites + 1):
        reply = client.chat.completions.create(model=model, messages=messages, **sampling)  # type: ignore[arg-type]
        text = reply.choices[0].message.content or ""
        sql = extract_sql(text)
        if turn > 0 and sql is not None and sql == attempt.final:
            attempt.queries.append(sql)
            break  # the model kept its query: checked
        attempt.queries.append(sql)
        if turn == max_rewrites:
            break
        messages.append({"role": "assistant", "content": text})
        messages.append({"role": "user", "content": CHECK_PROMPT.format(outcome=describe_outcome(db, sql))})
    return attempt


class SqlAgent(agl.LitAgent[Dict[str, Any]]):
    """Text-to-SQL with a self-check loop; reward is execution match of the final query."""

    def __init__(self, max_rewrites: int = 2) -> None:
        super().__init__()
        self.max_rewrites = max_rewrites

    def rollout(self, task: Dict[str, Any], resources: agl.NamedResources, rollout: agl.Rollout) -> float:
        llm = next(r for r in resources.values() if isinstance(r, agl.LLM))
        template = next((r for r in resources.values() if isinstance(r, agl.PromptTemplate)), SEED_PROMPT)
        prompt = template.format(schema=schema_text(task["db"]), question=task["question"])
        client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "EMPTY", max_retries=0)
        attempt = write_check_rewrite(
            client, llm.model, prompt, task["db"], max_rewrites=self.max_rewrites, **llm.sampling_parameters
        )
        agl.emit_object({"queries": attempt.queries, "final": attempt.final})
        return execution_match(task["db"], attempt.final, task["sql"])
