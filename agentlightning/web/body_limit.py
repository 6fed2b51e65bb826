"""Request body size limits for every server we ship, checked before (or while) the body is read.

A refusal is answered, not reset: a client such as `requests` or `httpx` sends its whole body before it
reads the answer, so closing the connection on a 150 MB upload shows it `ConnectionResetError` instead of
the 413. The rest of the body is therefore read and dropped (in pieces, never held; the slow-client
deadlines of `slow_clients` bound how long that may take) before the 413 goes out.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import ErrorShape, openai_error_body
from .limits import DEFAULT_MAX_BODY_SIZE, DEFAULT_MAX_REQUEST_SIZE

__all__ = ["BodySizeLimitMiddleware", "BodyTooLargeError", "DEFAULT_MAX_BODY_SIZE", "DEFAULT_MAX_REQUEST_SIZE"]

#: Bytes of an oversize body read and dropped so its sender sees the 413; past that the connection is closed.
DRAIN_LIMIT = 1024 * 1024 * 1024


class BodyTooLargeError(Exception):
    """A request body grew past the limit while a route was reading it."""


class BodySizeLimitMiddleware:
    """Pure ASGI middleware answering 413 to a request body over `max_body_size` bytes.

    A declared `Content-Length` over the limit is refused before the app runs; a chunked body is counted
    as it arrives and refused once past the limit, so the server never holds more than the limit per
    request. `hint` ends the message (how to raise the limit); `error_shape` writes the body.
    Subclasses may choose the exception a route reading the body sees (`too_large` / `is_too_large`),
    e.g. one the route answers itself.
    """

    def __init__(
        self, app: ASGIApp, max_body_size: int, hint: str = "", error_shape: ErrorShape = openai_error_body
    ) -> None:
        if max_body_size <= 0:
            raise ValueError(f"max_body_size must be a positive number of bytes, got {max_body_size}")
        self.app = app
        self.max_body_size = max_body_size
        self.hint = hint
        self.error_shape = error_shape

    def message(self, size: str) -> str:
        text = f"request body of {size} is over this server's limit of {self.max_body_size} bytes"
        return f"{text}; {self.hint}" if self.hint else text

    def too_large(self, size: str) -> Exception:
        return BodyTooLargeError(self.message(size))

    def is_too_large(self, exc: BaseException) -> bool:
        return isinstance(exc, BodyTooLargeError)

    async def _refuse(self, send: Send, size: str) -> None:
        body = self.error_shape(413, self.message(size), "request_too_large")
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        expects_continue = False
        for key, value in scope["headers"]:
            if key == b"expect":
                expects_continue = value.lower() == b"100-continue"
        for key, value in scope["headers"]:
            if key == b"content-length":
                if value.isdigit() and int(value) > self.max_body_size:
                    if not expects_continue:  # a client waiting for `100 Continue` has not sent the body
                        await _drain(receive)
                    await self._refuse(send, f"{int(value)} bytes")
                    return
                break
        received = 0
        overflowed = False
        body_done = False

        async def limited_receive() -> Message:
            nonlocal received, overflowed, body_done
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.max_body_size:
                    overflowed = True
                    raise self.too_large(f"more than {self.max_body_size} bytes")
            return message

        started = False
        replaced = False

        async def tracking_send(message: Any) -> None:
            nonlocal started, replaced
            if replaced:
                return
            if message["type"] == "http.response.start":
                started = True
                if overflowed:  # the app answered the overflow itself: let the client finish, then say 413
                    if not body_done:
                        await _drain(receive)
                    if message["status"] != 413:  # e.g. FastAPI's 400 "error parsing the body"
                        replaced = True
                        await self._refuse(send, f"more than {self.max_body_size} bytes")
                        return
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except Exception as exc:  # raised while a route that does not answer it itself read the body
            if started or not self.is_too_large(exc):
                raise
            if not body_done:
                await _drain(receive)
            await self._refuse(send, f"more than {self.max_body_size} bytes")


async def _drain(receive: Receive) -> None:
    """Read the rest of a request body and drop it (at most `DRAIN_LIMIT` bytes)."""
    drained = 0
    while drained <= DRAIN_LIMIT:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return
        drained += len(message.get("body", b""))
