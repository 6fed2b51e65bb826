"""The idempotency ledger of the SQL stores: one row per key in the store's own database (see `store.idempotency`).

Claiming a key is one write transaction (insert, else read the row), so two server processes never both
do the work of one key; the row's `status` stays NULL until the answer is kept. Rows older than the
retention are deleted now and then by the claims themselves.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Optional, Union

from ..idempotency import IDEMPOTENCY_LEASE_SECONDS, IDEMPOTENCY_RETENTION_SECONDS, IdempotencyLedger, StoredAnswer
from .engine import SqlEngine, SqlTransaction

__all__ = ["SqlIdempotencyLedger"]

# Delete expired rows on every this many claims of a process (cheap: they are found through an index).
_PRUNE_EVERY = 256


def _encode_headers(headers: list[tuple[bytes, bytes]]) -> str:
    return json.dumps([[name.decode("latin-1"), value.decode("latin-1")] for name, value in headers])


def _decode_headers(text: Optional[str]) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in json.loads(text or "[]")]


class SqlIdempotencyLedger(IdempotencyLedger):
    """Keys and answers in the `idempotency` table of `engine`'s database."""

    def __init__(
        self,
        engine: SqlEngine,
        clock: Callable[[], float] = time.time,
        *,
        lease_seconds: float = IDEMPOTENCY_LEASE_SECONDS,
        retention_seconds: float = IDEMPOTENCY_RETENTION_SECONDS,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self.lease_seconds = lease_seconds
        self.retention_seconds = retention_seconds
        self._claims = 0

    async def claim(self, key: str) -> Union[StoredAnswer, bool]:
        now = self._clock()
        self._claims += 1
        prune = self._claims % _PRUNE_EVERY == 0

        async def body(tx: SqlTransaction) -> Union[StoredAnswer, bool]:
            if prune:
                await tx.execute("DELETE FROM {idempotency} WHERE claimed_at < ?", (now - self.retention_seconds,))
            inserted = await tx.execute(
                "INSERT INTO {idempotency} (key, claimed_at) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (key, now)
            )
            if inserted:
                return True
            row = await tx.fetchone("SELECT claimed_at, status, headers, body FROM {idempotency} WHERE key = ?", (key,))
            if row is None:  # deleted meanwhile: this transaction saw the conflict, so ask again
                return False
            claimed_at, status, headers, stored = row
            if status is not None:
                return StoredAnswer(int(status), _decode_headers(headers), bytes(stored or b""))
            if now - float(claimed_at) > self.lease_seconds:  # the first try's process died holding the key
                taken = await tx.execute(
                    "UPDATE {idempotency} SET claimed_at = ? WHERE key = ? AND claimed_at = ? AND status IS NULL",
                    (now, key, claimed_at),
                )
                return bool(taken)
            return False

        return await self._engine.run(body, write=True)

    async def keep(self, key: str, answer: StoredAnswer) -> None:
        params: tuple[Any, ...] = (answer.status, _encode_headers(answer.headers), answer.body, key)

        async def body(tx: SqlTransaction) -> None:
            await tx.execute("UPDATE {idempotency} SET status = ?, headers = ?, body = ? WHERE key = ?", params)

        await self._engine.run(body, write=True)

    async def release(self, key: str) -> None:
        async def body(tx: SqlTransaction) -> None:
            await tx.execute("DELETE FROM {idempotency} WHERE key = ? AND status IS NULL", (key,))

        await self._engine.run(body, write=True)
