"""The SQL store written once: store logic over a small engine/dialect layer (SQLite, PostgreSQL)."""

from .dialect import SqlDialect
from .engine import SqlEngine, SqlTransaction
from .store import SqlLightningStore

__all__ = ["SqlDialect", "SqlEngine", "SqlTransaction", "SqlLightningStore"]
