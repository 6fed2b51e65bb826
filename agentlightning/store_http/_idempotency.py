"""Replay the answer to a POST sent again with the same `Idempotency-Key`, instead of doing it twice.

`LightningStoreClient` sends every POST again when its answer is lost (a 5xx from a proxy, a dropped
connection), and it cannot tell whether the server already did the work. It puts one random key on
all the tries of one call; this middleware remembers the answer to each key and replays it, so an
enqueue is never doubled and a dequeue never hands out an attempt nobody received. A try that
arrives while the first is still running waits for its answer. Answers of 5xx are not remembered
(the work may not have happened; the retry does it), nor are answers over `max_bytes // 16` (a
large search; reads are safe to redo).

Where the answers live: one server process keeps them in memory (bounded in entries and bytes, empty
again after a restart); several processes serving one database (`agl store --n-workers N`) share them
through the store's `IdempotencyLedger` (a table of that database), so a retry that reaches another
process than the first try is replayed too.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentlightning.store.idempotency import IdempotencyLedger, StoredAnswer

__all__ = ["IDEMPOTENCY_KEY_HEADER", "IdempotencyMiddleware"]

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
_HEADER_BYTES = IDEMPOTENCY_KEY_HEADER.lower().encode()
_MAX_KEY_LENGTH = 200

logger = logging.getLogger(__name__)


@dataclass
class _Answer:
    done: asyncio.Event = field(default_factory=asyncio.Event)
    start: Optional[Message] = None
    body: bytes = b""
    kept: bool = False  # a complete answer that can be replayed


class IdempotencyMiddleware:
    """Pure ASGI middleware: remember the answers to keyed POSTs (up to `max_entries` / `max_bytes`) and replay them.

    With a `ledger` the answers live in the store's database instead of this process (see module docs).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_entries: int = 4096,
        max_bytes: int = 16 << 20,
        ledger: Optional[IdempotencyLedger] = None,
    ) -> None:
        self.app = app
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ledger = ledger
        self._answers: OrderedDict[tuple[str, bytes], _Answer] = OrderedDict()
        self._bytes = 0

    def _key(self, scope: Scope) -> Optional[tuple[str, bytes]]:
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        for name, value in scope["headers"]:
            if name == _HEADER_BYTES:
                return (scope["path"], value) if 0 < len(value) <= _MAX_KEY_LENGTH else None
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = self._key(scope)
        if key is None:
            await self.app(scope, receive, send)
            return
        if self.ledger is not None:
            await self._shared(self.ledger, f"{key[0]} {key[1].decode('latin-1')}", scope, receive, send)
            return
        while True:
            answer = self._answers.get(key)
            if answer is None:
                break
            await answer.done.wait()
            if answer.kept:
                await self._replay(answer, send)
                return
            # The first try ended without an answer worth keeping (5xx, error): this one does the work.
        answer = _Answer()
        self._answers[key] = answer
        await self._run(key, answer, scope, receive, send)

    async def _capture(self, scope: Scope, receive: Receive, send: Send) -> Optional[StoredAnswer]:
        """Run the request, passing its answer on; returns the answer when it is worth keeping."""
        start: Optional[Message] = None
        chunks: list[bytes] = []
        complete = False

        async def remembering_send(message: Message) -> None:
            nonlocal start, complete
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                complete = not message.get("more_body", False)
            await send(message)

        await self.app(scope, receive, remembering_send)
        body = b"".join(chunks)
        if start is None or not complete or int(start["status"]) >= 500 or len(body) > self.max_bytes // 16:
            return None
        return StoredAnswer(int(start["status"]), list(start.get("headers", [])), body)

    async def _run(self, key: tuple[str, bytes], answer: _Answer, scope: Scope, receive: Receive, send: Send) -> None:
        stored: Optional[StoredAnswer] = None
        try:
            stored = await self._capture(scope, receive, send)
        finally:
            if stored is not None:
                answer.start = {"type": "http.response.start", "status": stored.status, "headers": stored.headers}
                answer.body = stored.body
                answer.kept = True
                self._bytes += len(answer.body)
                self._evict()
            else:
                self._answers.pop(key, None)
            answer.done.set()

    async def _shared(self, ledger: IdempotencyLedger, key: str, scope: Scope, receive: Receive, send: Send) -> None:
        """The work of `key` once across every process sharing the ledger; a try of a key another process
        is running waits for its answer (or for its lease to expire, when that process died)."""
        delay = 0.02
        while True:
            try:
                claimed = await ledger.claim(key)
            except Exception:  # the database refuses writes (full, read-only): serve without the ledger
                logger.warning(
                    "idempotency ledger unavailable; serving %s without replay protection", key, exc_info=True
                )
                await self.app(scope, receive, send)
                return
            if isinstance(claimed, StoredAnswer):
                await _send_stored(claimed, send)
                return
            if claimed:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
        stored: Optional[StoredAnswer] = None
        try:
            stored = await self._capture(scope, receive, send)
        finally:
            try:
                if stored is not None:
                    await ledger.keep(key, stored)
                else:
                    await ledger.release(key)
            except Exception:
                logger.warning("idempotency ledger could not record the answer to %s", key, exc_info=True)

    def _evict(self) -> None:
        while len(self._answers) > self.max_entries or self._bytes > self.max_bytes:
            oldest_key = next(iter(self._answers))
            oldest = self._answers[oldest_key]
            if not oldest.done.is_set():  # still running: it is the newest work, keep it
                self._answers.move_to_end(oldest_key)
                if all(not a.done.is_set() for a in self._answers.values()):
                    return
                continue
            del self._answers[oldest_key]
            self._bytes -= len(oldest.body)

    @staticmethod
    async def _replay(answer: _Answer, send: Send) -> None:
        assert answer.start is not None
        await send(answer.start)
        await send({"type": "http.response.body", "body": answer.body})


async def _send_stored(answer: StoredAnswer, send: Send) -> None:
    await send({"type": "http.response.start", "status": answer.status, "headers": answer.headers})
    await send({"type": "http.response.body", "body": answer.body})
