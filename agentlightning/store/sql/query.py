"""Filtering, sorting and paging as SQL, with the same results as the in-memory collections.

Filters follow `FilterOptions`: the conditions on one field (exact / within / contains) must all hold,
fields are combined by the caller's `filter_logic`, and `must` conditions always apply.
Sorting puts None first ascending and last descending; ties keep insertion order (the `id` column).
Substring tests are case-sensitive, like Python's `in`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from .dialect import SqlDialect

__all__ = ["Condition", "Where", "order_by", "limit_offset", "NO_LIMIT"]

NO_LIMIT = 2**62
"""LIMIT used for "unlimited" so one statement shape serves both databases."""

Condition = tuple[str, list[Any]]


@dataclass
class Where:
    """A WHERE clause: `require()`d conditions ANDed with the per-field terms combined by `logic`."""

    dialect: SqlDialect
    logic: str = "and"
    _must: list[Condition] = field(default_factory=list)
    _terms: list[Condition] = field(default_factory=list)

    def exact(self, column: str, value: Any) -> Optional[Condition]:
        return None if value is None else (f"{column} = ?", [value])

    def within(self, column: str, values: Optional[Sequence[Any]]) -> Optional[Condition]:
        if values is None:
            return None
        unique = list(dict.fromkeys(values))
        if not unique:
            return ("1 = 0", [])
        return (f"{column} IN ({', '.join('?' for _ in unique)})", unique)

    def contains(self, column: str, needle: Optional[Any]) -> Optional[Condition]:
        return None if needle is None else (self.dialect.contains_sql(column), [str(needle)])

    def require(self, *conditions: Optional[Condition]) -> Where:
        self._must.extend(c for c in conditions if c is not None)
        return self

    def required(self, *conditions: Condition) -> Where:
        """A copy with more always-applied conditions (this one is left unchanged)."""
        return replace(self, _must=[*self._must, *conditions], _terms=list(self._terms))

    def field(self, *conditions: Optional[Condition]) -> Where:
        """Add one field's conditions as a single term (all must hold); nothing when all are None."""
        given = [c for c in conditions if c is not None]
        if given:
            sql = " AND ".join(c[0] for c in given)
            self._terms.append((f"({sql})" if len(given) > 1 else sql, [p for c in given for p in c[1]]))
        return self

    def sql(self) -> tuple[str, list[Any]]:
        """`(" WHERE ...", params)`, or `("", [])` when there is no condition."""
        parts = [c[0] for c in self._must]
        params = [p for c in self._must for p in c[1]]
        if self._terms:
            joiner = " OR " if self.logic == "or" else " AND "
            parts.append("(" + joiner.join(t[0] for t in self._terms) + ")")
            params.extend(p for t in self._terms for p in t[1])
        if not parts:
            return "", []
        return " WHERE " + " AND ".join(parts), params


def order_by(column: Optional[str], order: str, *, alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    if column is None:
        return f" ORDER BY {prefix}id ASC"
    direction = "DESC NULLS LAST" if order == "desc" else "ASC NULLS FIRST"
    return f" ORDER BY {prefix}{column} {direction}, {prefix}id ASC"


def limit_offset(limit: int, offset: int) -> tuple[str, list[Any]]:
    if limit == -1 and offset == 0:
        return "", []
    return " LIMIT ? OFFSET ?", [NO_LIMIT if limit == -1 else limit, offset]
