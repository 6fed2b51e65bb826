"""What differs between the SQL databases we support, kept to a handful of fragments.

Store SQL is written once as templates: `?` placeholders and `{table}` names (`{rollouts}`, `{spans}`...).
A dialect renders them for its driver and supplies the few fragments that are not portable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

__all__ = ["SqlDialect", "SQLITE", "postgres_dialect", "TABLES", "validate_identifier"]

TABLES: tuple[str, ...] = (
    "rollouts",
    "attempts",
    "spans",
    "span_sequences",
    "resources",
    "workers",
    "meta",
    "idempotency",
)
"""Logical table names; physical names get an `agl_` prefix (and a schema on PostgreSQL)."""

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def validate_identifier(kind: str, name: str) -> str:
    if not _IDENTIFIER.match(name):
        raise ValueError(
            f"invalid {kind} {name!r}; use letters, digits and underscores (not starting with a digit, max 63 chars)"
        )
    return name


@dataclass(frozen=True)
class SqlDialect:
    """Portable fragments and template rendering for one database."""

    name: str
    placeholder: str
    """What `?` becomes for the driver."""
    text: str
    """Column type of strings; on PostgreSQL with byte-order collation so ORDER BY matches Python."""
    real: str
    bigint: str
    blob: str
    identity: str
    """Column definition of the auto-incrementing insertion-order key."""
    greatest: str
    """Name of the two-argument max function (`MAX` in SQLite, `GREATEST` in PostgreSQL)."""
    contains: str
    """Case-sensitive substring test with two `{}` slots: haystack column, needle placeholder."""
    for_update: str
    """Suffix of a SELECT that locks the rows it reads until the transaction ends."""
    skip_locked: str
    """Suffix of a SELECT that claims rows for this transaction, skipping rows other transactions hold."""
    next_queue_position: str
    """Expression giving the next queue position (strictly greater than every queued one)."""
    run_of_rollout: str
    """Expression giving a rollout row's `metadata["agl_run"]` (the run a dequeue may be limited to)."""
    schema: Optional[str] = None
    _cache: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def table(self, logical: str) -> str:
        physical = f"agl_{logical}"
        return f'"{self.schema}".{physical}' if self.schema else physical

    def render(self, template: str) -> str:
        """Turn a store SQL template into driver SQL (cached; templates are constants).

        Templates name tables as `{rollouts}`, column types as `{text}` / `{real}` / `{bigint}` / `{blob}` /
        `{identity}`,
        and use `{greatest}`, `{for_update}`, `{skip_locked}`, `{next_queue_position}` and `{run_of_rollout}` for
        the non-portable fragments.
        """
        rendered = self._cache.get(template)
        if rendered is None:
            rendered = template.format_map(self._substitutions())
            if self.placeholder != "?":
                rendered = rendered.replace("%", "%%").replace("?", self.placeholder)
            self._cache[template] = rendered
        return rendered

    def _substitutions(self) -> dict[str, str]:
        tables = {name: self.table(name) for name in TABLES}
        return {
            **tables,
            "text": self.text,
            "real": self.real,
            "bigint": self.bigint,
            "blob": self.blob,
            "identity": self.identity,
            "greatest": self.greatest,
            "for_update": self.for_update,
            "skip_locked": self.skip_locked,
            "next_queue_position": self.next_queue_position.format_map(tables),
            "run_of_rollout": self.run_of_rollout,
        }

    def contains_sql(self, column: str) -> str:
        return self.contains.format(column, "?")


SQLITE = SqlDialect(
    name="sqlite",
    placeholder="?",
    text="TEXT",
    real="REAL",
    bigint="INTEGER",
    blob="BLOB",
    identity="INTEGER PRIMARY KEY",
    greatest="MAX",
    contains="instr({}, {}) > 0",
    # BEGIN IMMEDIATE already makes every write transaction exclusive: no row locks needed.
    for_update="",
    skip_locked="",
    # The WHERE lets SQLite answer from the partial queue index in one lookup; without it MAX scans the whole
    # table for every queued row, and enqueueing N rollouts costs O(N * table size).
    next_queue_position="(SELECT COALESCE(MAX(queue_position), 0) + 1 FROM {rollouts} WHERE queue_position IS NOT NULL)",
    run_of_rollout="json_extract(metadata, '$.agl_run')",
)


def postgres_dialect(schema: Optional[str]) -> SqlDialect:
    if schema is not None:
        validate_identifier("PostgreSQL schema name", schema)
    queue_sequence = f'"{schema}".agl_queue_positions' if schema else "agl_queue_positions"
    return SqlDialect(
        name="postgres",
        placeholder="%s",
        text='TEXT COLLATE "C"',
        real="DOUBLE PRECISION",
        bigint="BIGINT",
        blob="BYTEA",
        identity="BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
        greatest="GREATEST",
        contains="strpos({}, {}) > 0",
        for_update=" FOR UPDATE",
        skip_locked=" FOR UPDATE SKIP LOCKED",
        next_queue_position=f"nextval('{queue_sequence}')",
        run_of_rollout="(metadata::json ->> 'agl_run')",
        schema=schema,
    )
