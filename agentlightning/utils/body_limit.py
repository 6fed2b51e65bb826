"""Request body size limits for the servers we start (store, LLM proxy, gateway), checked before the body is read."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["BodySizeLimitMiddleware", "BodyTooLargeError", "DEFAULT_MAX_REQUEST_SIZE"]

#: Largest request the LLM proxy and the gateway accept by default: room for long prompts and images.
DEFAULT_MAX_REQUEST_SIZE = 32 * 1024 * 1024


class BodyTooLargeError(Exception):
    """A request body grew past the limit while a route was reading it."""


class BodySizeLimitMiddleware:
    """Pure ASGI middleware answering 413 to a request body over `max_body_size` bytes, before it is read.

    A declared `Content-Length` over the limit is refused at once; a chunked body is counted as it
    arrives and refused once past the limit, so the server never holds more than the limit per request.
    Subclasses choose the wording (`message`), the body (`error_body`) and the exception raised inside a
    route that reads the body (`too_large` / `is_too_large`). The default body is an OpenAI-style error.
    """

    def __init__(self, app: ASGIApp, max_body_size: int) -> None:
        if max_body_size <= 0:
            raise ValueError(f"max_body_size must be a positive number of bytes, got {max_body_size}")
        self.app = app
        self.max_body_size = max_body_size

    def message(self, size: str) -> str:
        return f"request body of {size} is over this server's limit of {self.max_body_size} bytes"

    def error_body(self, size: str) -> bytes:
        error = {"message": self.message(size), "type": "request_too_large", "param": None, "code": 413}
        return json.dumps({"error": error}).encode()

    def too_large(self, size: str) -> Exception:
        return BodyTooLargeError(size)

    def is_too_large(self, exc: BaseException) -> bool:
        return isinstance(exc, BodyTooLargeError)

    async def _refuse(self, send: Send, size: str) -> None:
        body = self.error_body(size)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope["headers"]:
            if key == b"content-length":
                if value.isdigit() and int(value) > self.max_body_size:
                    await self._refuse(send, f"{int(value)} bytes")
                    return
                break
        received = 0

        async def limited_receive() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_size:
                    raise self.too_large(f"more than {received} bytes")
            return message

        started = False

        async def tracking_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except Exception as exc:  # raised while a route that does not answer it itself read the body
            if started or not self.is_too_large(exc):
                raise
            await self._refuse(send, f"more than {received} bytes")
