"""`EchoServer`: an OpenAI-compatible chat-completions server that answers with the last user message.

It needs no model, no GPU and no network, so the quick start, the docs and the examples' smoke runs work on a
fresh install (`agl serve --model echo`). Replies are deterministic: the text of the last user message, or
`reply` when one is given. Like vLLM with `return_token_ids`, responses carry `prompt_token_ids` and per-choice
`token_ids`; tokens are the UTF-8 bytes of a plain chat rendering, so later turns extend earlier prompts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, List, Optional

from ..types.resources import LLM
from .protocol import ChatCompletionRequest, new_completion_id, now, openai_error

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ..utils.server_launcher import PythonServerLauncher

__all__ = ["EchoServer", "echo_reply", "byte_token_ids", "render_chat_text"]

logger = logging.getLogger(__name__)


def _text(message: Dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def echo_reply(messages: List[Dict[str, Any]]) -> str:
    """The text of the last user message ("" when there is none)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text(message)
    return ""


def render_chat_text(messages: List[Dict[str, Any]]) -> str:
    """The prompt as text: `<|role|>content\\n` per message, then `<|assistant|>`."""
    return "".join(f"<|{message.get('role', 'user')}|>{_text(message)}\n" for message in messages) + "<|assistant|>"


def byte_token_ids(text: str) -> List[int]:
    """Toy tokenizer: one token per UTF-8 byte."""
    return list(text.encode("utf-8"))


class EchoServer:
    """Serve deterministic echo replies at `/v1/chat/completions` (plus `/v1/models` and `/health`).

    Args:
        model_name: the id reported by `/v1/models` and in responses (requests may name any model).
        host: the interface to bind.
        port: the port; None or 0 picks a free one.
        reply: a fixed reply for every request instead of the echo.
    """

    def __init__(
        self,
        *,
        model_name: str = "echo",
        host: str = "127.0.0.1",
        port: Optional[int] = None,
        reply: Optional[str] = None,
    ) -> None:
        self.model_name = model_name
        self.host = host
        self.reply = reply
        self.requests_served = 0
        self._requested_port = port or None
        self._launcher: Optional[PythonServerLauncher] = None
        self._app: Optional[FastAPI] = None

    @property
    def app(self) -> FastAPI:
        if self._app is None:
            self._app = _build_app(self)
        return self._app

    @property
    def endpoint(self) -> str:
        """The OpenAI base URL, e.g. `http://127.0.0.1:8000/v1` (valid once started)."""
        if self._launcher is None or self._launcher.port is None:
            raise RuntimeError("the echo server has no port yet; call start() first")
        return f"{self._launcher.access_endpoint}/v1"

    def answer(self, messages: List[Dict[str, Any]]) -> str:
        return self.reply if self.reply is not None else echo_reply(messages)

    def start(self) -> None:
        """Start uvicorn on a background thread; returns once the server answers its health check."""
        _run_sync(self.astart())

    def stop(self) -> None:
        _run_sync(self.astop())

    async def astart(self) -> None:
        from ..utils.server_launcher import PythonServerLauncher, PythonServerLauncherArgs

        if self._launcher is not None and self._launcher.is_running():
            return
        args = PythonServerLauncherArgs(
            host=self.host, port=self._requested_port, launch_mode="thread", healthcheck_url="/health"
        )
        self._launcher = PythonServerLauncher(self.app, args)
        await self._launcher.start()
        logger.info("Echo server %r listening on %s", self.model_name, self.endpoint)

    async def astop(self) -> None:
        if self._launcher is not None:
            await self._launcher.stop()

    def run_forever(self) -> None:
        """Serve until interrupted (the `agl serve --model echo` command)."""
        self.start()
        try:
            while self._launcher is not None and self._launcher.is_running():
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def __enter__(self) -> EchoServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def as_resource(self) -> LLM:
        """An `LLM` resource pointing at this server."""
        return LLM(endpoint=self.endpoint, model=self.model_name)


def _run_sync(coroutine: Any) -> Any:
    """Run a coroutine to completion from sync code, even when the calling thread has a running loop."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _completion(server: EchoServer, body: ChatCompletionRequest) -> Dict[str, Any]:
    text = server.answer(body.messages)
    limit = body.max_completion_tokens or body.max_tokens
    response_ids = byte_token_ids(text)
    finish_reason = "stop"
    if limit is not None and len(response_ids) > limit:
        response_ids = response_ids[:limit]
        text = bytes(response_ids).decode("utf-8", errors="ignore")
        finish_reason = "length"
    prompt_ids = byte_token_ids(render_chat_text(body.messages))
    with_ids = body.return_token_ids is not False
    choices: List[Dict[str, Any]] = []
    for index in range(body.n):
        choice: Dict[str, Any] = {
            "index": index,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish_reason,
            "logprobs": None,
        }
        if with_ids:
            choice["token_ids"] = response_ids
        choices.append(choice)
    result: Dict[str, Any] = {
        "id": new_completion_id(),
        "object": "chat.completion",
        "created": now(),
        "model": server.model_name,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(response_ids) * body.n,
            "total_tokens": len(prompt_ids) + len(response_ids) * body.n,
        },
    }
    if with_ids:
        result["prompt_token_ids"] = prompt_ids
    return result


async def _sse(completion: Dict[str, Any], include_usage: bool) -> AsyncIterator[str]:
    base = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"]}
    base["model"] = completion["model"]

    def chunk(choices: List[Dict[str, Any]], **extra: Any) -> str:
        return f"data: {json.dumps({**base, 'choices': choices, **extra})}\n\n"

    first_extra = {"prompt_token_ids": completion["prompt_token_ids"]} if "prompt_token_ids" in completion else {}
    for choice in completion["choices"]:
        delta = {"role": "assistant", "content": choice["message"]["content"]}
        opening = {"index": choice["index"], "delta": delta, "finish_reason": None}
        if "token_ids" in choice:
            opening["token_ids"] = choice["token_ids"]
        yield chunk([opening], **first_extra)
        yield chunk([{"index": choice["index"], "delta": {}, "finish_reason": choice["finish_reason"]}])
    if include_usage:
        yield chunk([], usage=completion["usage"])
    yield "data: [DONE]\n\n"


def _build_app(server: EchoServer) -> FastAPI:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI(title="agentlightning echo server")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:  # type: ignore[reportUnusedFunction]
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors())
        return JSONResponse(status_code=400, content=openai_error(f"invalid request: {details}"))

    @app.get("/health")
    @app.get("/v1/health")
    async def _health() -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return {"status": "ok", "model": server.model_name}

    @app.get("/v1/models")
    async def _models() -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return {
            "object": "list",
            "data": [{"id": server.model_name, "object": "model", "created": 0, "owned_by": "agentlightning"}],
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def _chat(body: ChatCompletionRequest) -> Any:  # type: ignore[reportUnusedFunction]
        server.requests_served += 1
        completion = _completion(server, body)
        if body.stream:
            include_usage = body.stream_options is not None and body.stream_options.include_usage
            return StreamingResponse(_sse(completion, include_usage), media_type="text/event-stream")
        return JSONResponse(content=completion)

    return app
