"""A loopback upstream that answers every POST under /v1 with scripted SSE bytes, malformed ones included."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from tests.support.openai_server import OpenAITestServer

__all__ = ["RawStreamServer", "chat_chunk"]


def chat_chunk(content: str, **choice: Any) -> bytes:
    """One well-formed chat-completion SSE event carrying `content`."""
    import json

    body = {
        "id": "chatcmpl-raw",
        "object": "chat.completion.chunk",
        "model": "raw-model",
        "choices": [{"index": 0, "delta": {"content": content}, **choice}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class RawStreamServer(OpenAITestServer):
    """Streams `events` (bytes, sent as given) to every POST under /v1; `requests` records the bodies."""

    def __init__(self, events: Sequence[bytes]) -> None:
        self.events = list(events)
        super().__init__()

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/{path:path}")
        async def stream(request: Request, path: str) -> Any:  # pyright: ignore[reportUnusedFunction]
            self.requests.append(await request.json())

            def events() -> Iterator[bytes]:
                yield from self.events

            return StreamingResponse(events(), media_type="text/event-stream")

        return app
