"""`EchoServer`: an OpenAI-compatible chat-completions server that answers with the last user message.

It needs no model, no GPU and no network, so the quick start, the docs and the examples' smoke runs work on a
fresh install (`agl serve --model echo`). Replies are deterministic: the text of the last user message, or
`reply` when one is given. Like vLLM with `return_token_ids`, responses carry `prompt_token_ids` and per-choice
`token_ids`; tokens are the UTF-8 bytes of a plain chat rendering, so later turns extend earlier prompts.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, List, Optional

from ..types.resources import LLM
from ..web.limits import DEFAULT_MAX_REQUEST_SIZE
from .protocol import ChatCompletionRequest, new_completion_id, now
from .shell import OpenAIServer

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

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


class EchoServer(OpenAIServer):
    """Serve deterministic echo replies at `/v1/chat/completions`, `/v1/responses` and `/v1/messages`
    (plus `/v1/models` and `/health`).

    Args:
        model_name: the id reported by `/v1/models` and in responses (requests may name any model).
        host: the interface to bind.
        port: the port; None or 0 picks a free one.
        reply: a fixed reply for every request instead of the echo.
        max_body_size / allowed_hosts / allowed_origins: see `OpenAIServer`.
    """

    kind = "echo server"

    def __init__(
        self,
        *,
        model_name: str = "echo",
        host: str = "127.0.0.1",
        port: Optional[int] = None,
        reply: Optional[str] = None,
        max_body_size: int = DEFAULT_MAX_REQUEST_SIZE,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
    ) -> None:
        super().__init__(
            model_name=model_name,
            host=host,
            port=port,
            max_body_size=max_body_size,
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
        )
        self.reply = reply
        self.requests_served = 0

    def answer(self, messages: List[Dict[str, Any]]) -> str:
        return self.reply if self.reply is not None else echo_reply(messages)

    async def serve_chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        from starlette.responses import JSONResponse, StreamingResponse

        self.requests_served += 1
        completion = _completion(self, body)
        if body.stream:
            include_usage = body.stream_options is not None and body.stream_options.include_usage
            return StreamingResponse(_sse(completion, include_usage), media_type="text/event-stream")
        return JSONResponse(content=completion)

    async def complete(self, body: ChatCompletionRequest, request: Request) -> Dict[str, Any]:
        self.requests_served += 1
        return _completion(self, body)

    def __enter__(self) -> EchoServer:
        self.start()
        return self

    def as_resource(self) -> LLM:
        """An `LLM` resource pointing at this server."""
        return LLM(endpoint=self.endpoint, model=self.model_name)


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
