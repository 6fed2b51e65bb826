"""Replay the answer to a POST sent again with the same `Idempotency-Key`, instead of doing it twice.

`LightningStoreClient` sends every POST again when its answer is lost (a 5xx from a proxy, a dropped
connection), and it cannot tell whether the server already did the work. It puts one random key on
all the tries of one call; this middleware remembers the answer to each key and replays it, so an
enqueue is never doubled and a dequeue never hands out an attempt nobody received. A try that
arrives while the first is still running waits for its answer. Answers of 5xx are not remembered
(the work may not have happened; the retry does it), nor are answers over `max_bytes // 16` (a
large search; reads are safe to redo). The memory is this process's: bounded in entries and bytes,
and empty again after a server restart.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["IDEMPOTENCY_KEY_HEADER", "IdempotencyMiddleware"]

IDEMPOTENCY_KEY_HEADER = "Idempotency-Key"
_HEADER_BYTES = IDEMPOTENCY_KEY_HEADER.lower().encode()
_MAX_KEY_LENGTH = 200


@dataclass
class _Answer:
    done: asyncio.Event = field(default_factory=asyncio.Event)
    start: Optional[Message] = None
    body: bytes = b""
    kept: bool = False  # a complete answer that can be replayed


class IdempotencyMiddleware:
    """Pure ASGI middleware: remember the answers to keyed POSTs (up to `max_entries` / `max_bytes`) and replay them."""

    def __init__(self, app: ASGIApp, max_entries: int = 4096, max_bytes: int = 16 << 20) -> None:
        self.app = app
        self.max_entries = max_entries
        self.max_bytes = max_bytes
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

    async def _run(self, key: tuple[str, bytes], answer: _Answer, scope: Scope, receive: Receive, send: Send) -> None:
        chunks: list[bytes] = []
        complete = False

        async def remembering_send(message: Message) -> None:
            nonlocal complete
            if message["type"] == "http.response.start":
                answer.start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                complete = not message.get("more_body", False)
            await send(message)

        try:
            await self.app(scope, receive, remembering_send)
        finally:
            status = int(answer.start["status"]) if answer.start is not None else 500
            answer.body = b"".join(chunks)
            answer.kept = complete and status < 500 and len(answer.body) <= self.max_bytes // 16
            if answer.kept:
                self._bytes += len(answer.body)
                self._evict()
            else:
                self._answers.pop(key, None)
            answer.done.set()

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
