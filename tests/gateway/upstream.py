"""A loopback upstream for gateway tests: `/v1/completions` and `/v1/responses` (plain and streamed),
plus scripted HTTP statuses to exercise retries. Chat completions come from `tests.support.openai_server`.

Token ids are deterministic: prompt ids from `tokenize(prompt)`, response ids from `tokenize(reply)`
followed by the end token, returned vLLM-style when the request asks with `return_token_ids`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, Optional

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from tests.support.openai_server import END_TOKEN, tokenize

__all__ = ["UpstreamServer", "REPLY"]

REPLY = "forty two"


def _prompt_text(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        prompt = " ".join(str(p) for p in prompt)  # type: ignore[union-attr]
    return str(prompt)


def _input_text(body: dict[str, Any]) -> str:
    items = body.get("input")
    if isinstance(items, str):
        return items
    parts: list[str] = []
    for item in items or []:
        content = item.get("content")
        parts.append(content if isinstance(content, str) else " ".join(p.get("text", "") for p in content or []))
    return " ".join(parts)


class UpstreamServer:
    """Runs in a thread on 127.0.0.1; `requests` records bodies, `statuses` scripts the next answers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        self.port = 0
        self._server: Optional[uvicorn.Server] = None
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self.app = self._build_app()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _scripted_error(self, body: dict[str, Any]) -> Optional[JSONResponse]:
        with self._lock:
            self.requests.append(body)
            status = self.statuses.pop(0) if self.statuses else None
        if status is None:
            return None
        return JSONResponse({"error": {"message": f"scripted {status}", "type": "scripted"}}, status_code=status)

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/completions")
        async def completions(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
            body = await request.json()
            error = self._scripted_error(body)
            if error is not None:
                return error
            with_ids = bool(body.get("return_token_ids"))
            prompt_ids, reply_ids = tokenize(_prompt_text(body)), [*tokenize(REPLY), END_TOKEN]
            base = {
                "id": f"cmpl-{uuid.uuid4().hex[:12]}",
                "object": "text_completion",
                "created": 1,
                "model": body.get("model"),
            }
            if not body.get("stream"):
                choice: dict[str, Any] = {"index": 0, "text": REPLY, "finish_reason": "stop"}
                if with_ids:
                    choice["token_ids"], choice["prompt_token_ids"] = reply_ids, prompt_ids
                return {
                    **base,
                    "choices": [choice],
                    "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": 3},
                }

            def events() -> Iterator[str]:
                pieces = ["forty", " two", ""]
                for i, piece in enumerate(pieces):
                    choice = {"index": 0, "text": piece, "finish_reason": "stop" if i == 2 else None}
                    if with_ids:
                        choice["token_ids"] = reply_ids[i : i + 1]
                        if i == 0:
                            choice["prompt_token_ids"] = prompt_ids
                    yield f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        @app.post("/v1/responses")
        async def responses(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
            body = await request.json()
            error = self._scripted_error(body)
            if error is not None:
                return error
            with_ids = bool(body.get("return_token_ids"))
            text = f"{body.get('instructions') or ''} {_input_text(body)}"
            full: dict[str, Any] = {
                "id": f"resp-{uuid.uuid4().hex[:12]}",
                "object": "response",
                "created_at": 1,
                "model": body.get("model"),
                "status": "completed",
                "output": [
                    {
                        "type": "message",
                        "id": "msg-1",
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": REPLY, "annotations": []}],
                    }
                ],
                "usage": {"input_tokens": 4, "output_tokens": 3, "total_tokens": 7},
            }
            if with_ids:
                full["prompt_token_ids"] = tokenize(text.strip())
                full["output_token_ids"] = [*tokenize(REPLY), END_TOKEN]
            if not body.get("stream"):
                return full

            def events() -> Iterator[str]:
                created = {"type": "response.created", "response": {**full, "status": "in_progress", "output": []}}
                yield f"event: response.created\ndata: {json.dumps(created)}\n\n"
                for piece in ("forty", " two"):
                    delta = {"type": "response.output_text.delta", "delta": piece, "item_id": "msg-1"}
                    yield f"event: response.output_text.delta\ndata: {json.dumps(delta)}\n\n"
                done = {"type": "response.completed", "response": full}
                yield f"event: response.completed\ndata: {json.dumps(done)}\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        @app.get("/v1/models")
        async def models() -> Any:  # pyright: ignore[reportUnusedFunction]
            return {"object": "list", "data": [{"id": "upstream-model", "object": "model"}]}

        return app

    def start(self) -> UpstreamServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("upstream test server failed to start")
            time.sleep(0.01)
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)

    def __enter__(self) -> UpstreamServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
