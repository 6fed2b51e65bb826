"""Tables and indexes of the SQL store, as dialect templates; every statement is idempotent.

Documents (inputs, configs, metadata, spans, resources) are JSON text: the store never queries inside
them, and text keeps their key order exactly (PostgreSQL JSONB would not). Columns the store filters or
sorts on are real columns.
"""

from __future__ import annotations

from .dialect import SqlDialect

__all__ = ["SCHEMA_VERSION", "schema_statements"]

SCHEMA_VERSION = 1

_TABLES = [
    """CREATE TABLE IF NOT EXISTS {meta} (
        key {text} PRIMARY KEY,
        value {text}
    )""",
    # queue_position is set exactly while the rollout is queuing/requeuing (its place in the FIFO);
    # attempt_count is the sequence id of its latest attempt.
    """CREATE TABLE IF NOT EXISTS {rollouts} (
        id {identity},
        rollout_id {text} NOT NULL UNIQUE,
        input {text} NOT NULL,
        start_time {real} NOT NULL,
        end_time {real},
        mode {text},
        resources_id {text},
        status {text} NOT NULL,
        config {text} NOT NULL,
        metadata {text},
        timeout_seconds {real},
        unresponsive_seconds {real},
        queue_position {bigint},
        attempt_count {bigint} NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE IF NOT EXISTS {attempts} (
        id {identity},
        rollout_id {text} NOT NULL,
        attempt_id {text} NOT NULL,
        sequence_id {bigint} NOT NULL,
        start_time {real} NOT NULL,
        end_time {real},
        status {text} NOT NULL,
        worker_id {text},
        last_heartbeat_time {real},
        metadata {text},
        UNIQUE (rollout_id, attempt_id),
        UNIQUE (rollout_id, sequence_id)
    )""",
    """CREATE TABLE IF NOT EXISTS {spans} (
        id {identity},
        rollout_id {text} NOT NULL,
        attempt_id {text} NOT NULL,
        sequence_id {bigint} NOT NULL,
        trace_id {text} NOT NULL,
        span_id {text} NOT NULL,
        parent_id {text},
        name {text} NOT NULL,
        start_time {real},
        end_time {real},
        data {text} NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS {span_sequences} (
        rollout_id {text} PRIMARY KEY,
        last_value {bigint} NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS {resources} (
        id {identity},
        resources_id {text} NOT NULL UNIQUE,
        create_time {real} NOT NULL,
        update_time {real} NOT NULL,
        version {bigint} NOT NULL,
        resources {text} NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS {workers} (
        id {identity},
        worker_id {text} NOT NULL UNIQUE,
        status {text} NOT NULL,
        heartbeat_stats {text},
        last_heartbeat_time {real},
        last_dequeue_time {real},
        last_busy_time {real},
        last_idle_time {real},
        current_rollout_id {text},
        current_attempt_id {text}
    )""",
    # Answers to POSTs by Idempotency-Key, shared by every server process (see store/idempotency.py):
    # status is NULL while the first try runs.
    """CREATE TABLE IF NOT EXISTS {idempotency} (
        key {text} PRIMARY KEY,
        claimed_at {real} NOT NULL,
        status {bigint},
        headers {text},
        body {blob}
    )""",
]

_INDEXES = [
    "CREATE INDEX IF NOT EXISTS agl_rollouts_queue ON {rollouts} (queue_position) WHERE queue_position IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS agl_rollouts_status ON {rollouts} (status)",
    "CREATE INDEX IF NOT EXISTS agl_spans_rollout_sequence ON {spans} (rollout_id, sequence_id)",
    # One row per (rollout, attempt, span id): re-adding a span is a duplicate the store skips (first write wins).
    "CREATE UNIQUE INDEX IF NOT EXISTS agl_spans_identity ON {spans} (rollout_id, attempt_id, span_id)",
    "CREATE INDEX IF NOT EXISTS agl_idempotency_claimed ON {idempotency} (claimed_at)",
]


def schema_statements(dialect: SqlDialect) -> list[str]:
    """Rendered DDL creating everything the store needs (safe to run again)."""
    statements: list[str] = []
    if dialect.name == "postgres":
        if dialect.schema:
            statements.append(f'CREATE SCHEMA IF NOT EXISTS "{dialect.schema}"')
        sequence = f'"{dialect.schema}".agl_queue_positions' if dialect.schema else "agl_queue_positions"
        statements.append(f"CREATE SEQUENCE IF NOT EXISTS {sequence}")
    statements.extend(dialect.render(ddl) for ddl in _TABLES + _INDEXES)
    version = str(SCHEMA_VERSION)
    statements.append(
        dialect.render(
            "INSERT INTO {meta} (key, value) VALUES ('schema_version', '" + version + "') ON CONFLICT (key) DO NOTHING"
        )
    )
    return statements
