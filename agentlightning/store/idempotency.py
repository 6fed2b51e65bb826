"""A ledger of answers to retried requests, kept in the store's own database so every server process shares it.

A store server replays the answer to a POST sent again with the same `Idempotency-Key` instead of doing
the work twice (see `agentlightning.store_http._idempotency`). One server process keeps its answers in
memory; several processes serving one database (`agl store --n-workers N`) must share them, or a retry
that reaches another process than the first try is executed again. A store whose data lives in a
database shared across processes offers such a ledger (`LightningStore.idempotency_ledger()`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Union

__all__ = ["IdempotencyLedger", "StoredAnswer", "IDEMPOTENCY_LEASE_SECONDS", "IDEMPOTENCY_RETENTION_SECONDS"]

#: A first try that holds its key longer than this without an answer is taken over by a retry (its process
#: died); longer than any request a server answers (long-polls are capped at 30 s).
IDEMPOTENCY_LEASE_SECONDS = 120.0
#: Answers are replayed for this long after the first try began; a client retries for 60 s by default.
IDEMPOTENCY_RETENTION_SECONDS = 600.0


@dataclass(frozen=True)
class StoredAnswer:
    """A complete HTTP answer to replay: status, headers (raw ASGI pairs) and body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class IdempotencyLedger(ABC):
    """Which process does the work of a key, and the answer it gave."""

    @abstractmethod
    async def claim(self, key: str) -> Union[StoredAnswer, bool]:
        """The stored answer to replay; True when the caller must do the work (the key is now its own);
        False while another try of the key is running (ask again a little later)."""

    @abstractmethod
    async def keep(self, key: str, answer: StoredAnswer) -> None:
        """Record the answer of the work done under `key` (claimed by the caller)."""

    @abstractmethod
    async def release(self, key: str) -> None:
        """Forget `key` without an answer (a 5xx, or too large to keep): the next try does the work."""
