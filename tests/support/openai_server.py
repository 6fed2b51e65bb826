"""A small OpenAI-compatible chat-completions server on 127.0.0.1 for tests and examples.

Replies are deterministic and scriptable: pass `respond(request_json) -> reply` where a reply is a
string (assistant content), a dict `{"content": ..., "tool_calls": [{"name": ..., "arguments": {...}}]}`,
a `Reply`, or an `ErrorReply` (HTTP error). Without a responder the server echoes the last user message.

Like vLLM with `return_token_ids`, it can return top-level `prompt_token_ids` and per-choice `token_ids`
(request body `return_token_ids: true`, or `always_return_token_ids=True`). Token ids come from a toy
word-level tokenizer over a chat template, so a later turn's prompt ids start with the earlier turn's
prompt + response ids. `logprobs: true` adds deterministic logprobs. Streaming (SSE) honours
`stream_options.include_usage`. Every request body and the (unstreamed-equivalent) reply are recorded.

Two more routes serve the same replies in other wire formats: `/v1/responses` (OpenAI Responses API,
plain and SSE-streamed; token ids as top-level `prompt_token_ids` / `token_ids` of the Response) and
`/v1/messages` (Anthropic Messages API, plain and streamed; token ids on the Message and on the final
`message_delta` event). Their requests are converted to chat messages (tokenized like the chat route)
and the responder sees that chat-style request.

Run standalone: `python -m tests.support.openai_server --port 8000` then point an OpenAI client at
`http://127.0.0.1:8000/v1`.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import threading
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

__all__ = [
    "Reply",
    "ToolCall",
    "ErrorReply",
    "Responder",
    "OpenAITestServer",
    "tokenize",
    "chat_prompt_token_ids",
    "reply_token_ids",
    "scripted",
]

# ---- toy tokenizer and chat template ----

ROLE_TOKENS = {"system": 1, "user": 2, "assistant": 3, "tool": 4, "developer": 1}
END_TOKEN = 5
_PIECE = re.compile(r"\s*\S+|\s+")


def _pieces(text: str) -> list[str]:
    return _PIECE.findall(text)


def tokenize(text: str) -> list[int]:
    """Word-level toy tokenizer: each whitespace-prefixed word maps to a stable id >= 100."""
    return _piece_ids(_pieces(text))


def _content_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _message_pieces(message: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(content pieces, tool-call pieces) of a message; tool calls render as `<tool_call> {json}`."""
    tool_pieces: list[str] = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        rendered = json.dumps({"name": function.get("name"), "arguments": function.get("arguments")})
        tool_pieces.extend(_pieces(" <tool_call> " + rendered))
    return _pieces(_content_text(message)), tool_pieces


def _piece_ids(pieces: Sequence[str]) -> list[int]:
    return [100 + zlib.crc32(piece.encode("utf-8")) % 50000 for piece in pieces]


def chat_prompt_token_ids(messages: Sequence[dict[str, Any]], *, template_drift: bool = False) -> list[int]:
    """Token ids of the prompt: `<role> text <end>` per message, then the assistant role token.

    `template_drift` renders earlier assistant turns without their end token, like chat templates that
    re-render history differently from what was generated (later prompts then stop extending earlier ones).
    """
    ids: list[int] = []
    for message in messages:
        content_pieces, tool_pieces = _message_pieces(message)
        ids.append(ROLE_TOKENS.get(str(message.get("role")), 6))
        ids.extend(_piece_ids(content_pieces + tool_pieces))
        if not (template_drift and message.get("role") == "assistant"):
            ids.append(END_TOKEN)
    ids.append(ROLE_TOKENS["assistant"])
    return ids


def reply_token_ids(message: dict[str, Any]) -> list[int]:
    """Token ids generated for an assistant message (text, then tool calls, then the end token)."""
    content_pieces, tool_pieces = _message_pieces(message)
    return [*_piece_ids(content_pieces + tool_pieces), END_TOKEN]


# ---- reply specs ----


@dataclass
class ToolCall:
    name: str
    arguments: Union[dict[str, Any], str] = field(default_factory=dict)
    id: Optional[str] = None


@dataclass
class Reply:
    content: Optional[str] = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: Optional[str] = None
    model: Optional[str] = None


@dataclass
class ErrorReply:
    status_code: int = 500
    message: str = "scripted error"


ReplyLike = Union[str, dict[str, Any], Reply, ErrorReply]
Responder = Callable[[dict[str, Any]], ReplyLike]


def _coerce_reply(reply: ReplyLike) -> Union[Reply, ErrorReply]:
    if isinstance(reply, (Reply, ErrorReply)):
        return reply
    if isinstance(reply, str):
        return Reply(content=reply)
    if isinstance(reply, dict):
        calls = [
            c if isinstance(c, ToolCall) else ToolCall(name=c["name"], arguments=c.get("arguments", {}), id=c.get("id"))
            for c in reply.get("tool_calls") or []
        ]
        return Reply(
            content=reply.get("content"),
            tool_calls=calls,
            finish_reason=reply.get("finish_reason"),
            model=reply.get("model"),
        )
    raise TypeError(f"a responder must return str, dict, Reply or ErrorReply, got {type(reply).__name__}")


def echo_responder(request: dict[str, Any]) -> ReplyLike:
    """Default reply: `Echo: <content of the last user message>`."""
    for message in reversed(request.get("messages") or []):
        if message.get("role") == "user":
            return f"Echo: {_content_text(message)}"
    return "Echo:"


def scripted(replies: Sequence[ReplyLike]) -> Responder:
    """A responder that returns `replies` in order (the last one repeats)."""
    lock = threading.Lock()
    position = [0]

    def respond(request: dict[str, Any]) -> ReplyLike:
        with lock:
            index = min(position[0], len(replies) - 1)
            position[0] += 1
        return replies[index]

    return respond


# ---- response building ----


def _logprob_entries(pieces: Sequence[str], start: int = 0) -> list[dict[str, Any]]:
    """Deterministic logprobs for tokens at positions start, start+1, ..."""
    return [
        {"token": p, "logprob": -round(0.05 + 0.1 * (i % 7), 4), "bytes": list(p.encode("utf-8")), "top_logprobs": []}
        for i, p in enumerate(pieces, start=start)
    ]


@dataclass
class _Completion:
    """Everything needed to answer one request, streamed or not."""

    id: str
    model: str
    created: int
    message: dict[str, Any]
    finish_reason: str
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    pieces: list[str]
    content_token_count: int
    with_token_ids: bool
    with_logprobs: bool
    n: int

    def usage(self) -> dict[str, int]:
        prompt, completion = len(self.prompt_token_ids), len(self.response_token_ids) * self.n
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def to_response(self) -> dict[str, Any]:
        choices: list[dict[str, Any]] = []
        for index in range(self.n):
            choice: dict[str, Any] = {"index": index, "message": self.message, "finish_reason": self.finish_reason}
            choice["logprobs"] = {"content": _logprob_entries(self.pieces)} if self.with_logprobs else None
            if self.with_token_ids:
                choice["token_ids"] = list(self.response_token_ids)
            choices.append(choice)
        response: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": self.usage(),
        }
        if self.with_token_ids:
            response["prompt_token_ids"] = list(self.prompt_token_ids)
        return response

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> str:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }
        return f"data: {json.dumps(body)}\n\n"

    def stream_events(self, include_usage: bool, before_chunk: Optional[Callable[[int], None]] = None) -> Iterator[str]:
        """SSE events (`before_chunk(i)` runs before the i-th is sent, e.g. to hold the stream back).

        Per choice, the chunks' `token_ids` (and logprobs) concatenate to the unstreamed ones: content
        tokens arrive one per chunk, tool-call tokens and the end token with the final chunk.
        """
        for index, event in enumerate(self._stream_events(include_usage)):
            if before_chunk is not None:
                before_chunk(index)
            yield event

    def _stream_events(self, include_usage: bool) -> Iterator[str]:
        """Role, one chunk per content token, tool-call deltas, finish, usage, [DONE]."""
        content_count = self.content_token_count
        for index in range(self.n):
            first: dict[str, Any] = {
                "index": index,
                "delta": {"role": "assistant", "content": ""},
                "finish_reason": None,
            }
            extra = {"prompt_token_ids": list(self.prompt_token_ids)} if self.with_token_ids and index == 0 else {}
            if self.with_token_ids:
                first["token_ids"] = []
            yield self._chunk([first], **extra)
            for position in range(content_count):
                piece = self.pieces[position]
                choice: dict[str, Any] = {"index": index, "delta": {"content": piece}, "finish_reason": None}
                if self.with_token_ids:
                    choice["token_ids"] = [self.response_token_ids[position]]
                if self.with_logprobs:
                    choice["logprobs"] = {"content": _logprob_entries([piece], position)}
                yield self._chunk([choice])
            for call_index, call in enumerate(self.message.get("tool_calls") or []):
                head = {
                    "index": call_index,
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""},
                }
                yield self._chunk([{"index": index, "delta": {"tool_calls": [head]}, "finish_reason": None}])
                arguments = call["function"]["arguments"]
                for start in range(0, len(arguments), 8):
                    part = {"index": call_index, "function": {"arguments": arguments[start : start + 8]}}
                    yield self._chunk([{"index": index, "delta": {"tool_calls": [part]}, "finish_reason": None}])
            last: dict[str, Any] = {"index": index, "delta": {}, "finish_reason": self.finish_reason}
            if self.with_token_ids:
                last["token_ids"] = self.response_token_ids[content_count:]
            if self.with_logprobs:
                last["logprobs"] = {"content": _logprob_entries(self.pieces[content_count:], content_count)}
            yield self._chunk([last])
        if include_usage:
            yield self._chunk([], usage=self.usage())
        yield "data: [DONE]\n\n"


# ---- Responses API and Anthropic Messages API formats ----


async def _json_body(request: Request) -> Optional[dict[str, Any]]:
    try:
        body = await request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None  # type: ignore[return-value]


def _parts_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))  # type: ignore[union-attr]
    return str(content or "")


def _responses_as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The test server's own reading of a Responses request as chat messages (independent of the library's)."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    items = body["input"]
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items:
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": item.get("role", "user"), "content": _parts_text(item.get("content"))})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function"}
            call["function"] = {"name": item.get("name"), "arguments": item.get("arguments")}
            if messages and messages[-1]["role"] == "assistant" and not messages[-1]["content"]:
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": _parts_text(item.get("output"))}
            )
    chat = {k: body[k] for k in ("model", "return_token_ids", "stream", "temperature") if k in body}
    tools = [{"type": "function", "function": {"name": t.get("name")}} for t in body.get("tools") or []]
    return {**chat, "messages": messages, **({"tools": tools} if tools else {})}


def _messages_as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The test server's own reading of an Anthropic Messages request as chat messages."""
    messages: list[dict[str, Any]] = []
    if body.get("system"):
        messages.append({"role": "system", "content": _parts_text(body["system"])})
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            messages.append({"role": message.get("role"), "content": content})
            continue
        text, calls = "", []
        for block in content or []:
            if block.get("type") == "text":
                text += str(block.get("text", ""))
            elif block.get("type") == "tool_use":
                arguments = json.dumps(block.get("input") or {})
                calls.append(
                    {
                        "id": block.get("id"),
                        "type": "function",
                        "function": {"name": block.get("name"), "arguments": arguments},
                    }
                )
            elif block.get("type") == "tool_result":
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": block.get("tool_use_id"),
                        "content": _parts_text(block.get("content")),
                    }
                )
        if text or calls:
            messages.append(
                {"role": message.get("role"), "content": text or None, **({"tool_calls": calls} if calls else {})}
            )
    chat = {k: body[k] for k in ("model", "return_token_ids", "stream", "temperature", "max_tokens") if k in body}
    return {**chat, "messages": messages}


def _sse(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"


@dataclass
class _Formatted:
    """A reply in another wire format: the complete response and the stream events that build it."""

    response: dict[str, Any]
    stream: list[dict[str, Any]]

    def events(self, before_chunk: Optional[Callable[[int], None]]) -> Iterator[str]:
        for index, event in enumerate(self.stream):
            if before_chunk is not None:
                before_chunk(index)
            yield _sse(event)


def _as_responses(completion: _Completion, body: dict[str, Any]) -> _Formatted:
    message = completion.message
    output: list[dict[str, Any]] = []
    text = message.get("content") or ""
    if text or not message.get("tool_calls"):
        part = {"type": "output_text", "text": text, "annotations": []}
        output.append(
            {
                "type": "message",
                "id": f"msg_{completion.id[9:]}",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    for call in message.get("tool_calls") or []:
        function = call["function"]
        item = {"type": "function_call", "id": f"fc_{call['id']}", "call_id": call["id"], "name": function["name"]}
        output.append({**item, "arguments": function["arguments"], "status": "completed"})
    usage = completion.usage()
    response: dict[str, Any] = {
        "id": f"resp_{completion.id[9:]}",
        "object": "response",
        "created_at": completion.created,
        "status": "completed" if completion.finish_reason != "length" else "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"} if completion.finish_reason == "length" else None,
        "error": None,
        "model": completion.model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["total_tokens"],
        },
    }
    if completion.with_token_ids:
        response["prompt_token_ids"] = list(completion.prompt_token_ids)
        response["token_ids"] = list(completion.response_token_ids)
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    pending.pop("prompt_token_ids", None)
    pending.pop("token_ids", None)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
    ]
    for index, item in enumerate(output):
        events.append(
            {"type": "response.output_item.added", "output_index": index, "item": {**item, "status": "in_progress"}}
        )
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            part = item["content"][0]
            events.append(
                {"type": "response.content_part.added", **where, "content_index": 0, "part": {**part, "text": ""}}
            )
            for piece in completion.pieces[: completion.content_token_count]:
                events.append({"type": "response.output_text.delta", **where, "content_index": 0, "delta": piece})
            events.append({"type": "response.output_text.done", **where, "content_index": 0, "text": part["text"]})
            events.append({"type": "response.content_part.done", **where, "content_index": 0, "part": part})
        else:
            arguments = item["arguments"]
            for start in range(0, len(arguments), 8):
                events.append(
                    {"type": "response.function_call_arguments.delta", **where, "delta": arguments[start : start + 8]}
                )
            events.append({"type": "response.function_call_arguments.done", **where, "arguments": arguments})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": response})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return _Formatted(response, events)


_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _as_messages(completion: _Completion, body: dict[str, Any]) -> _Formatted:
    message = completion.message
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        content.append(
            {"type": "tool_use", "id": call["id"], "name": function["name"], "input": json.loads(function["arguments"])}
        )
    usage = completion.usage()
    response: dict[str, Any] = {
        "id": f"msg_{completion.id[9:]}",
        "type": "message",
        "role": "assistant",
        "model": completion.model,
        "content": content,
        "stop_reason": _STOP_REASONS.get(completion.finish_reason, completion.finish_reason),
        "stop_sequence": None,
        "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]},
    }
    token_ids: dict[str, Any] = {}
    if completion.with_token_ids:
        token_ids = {
            "prompt_token_ids": list(completion.prompt_token_ids),
            "token_ids": list(completion.response_token_ids),
        }
        response.update(token_ids)
    start = {
        **response,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": 0},
    }
    for key in token_ids:
        start.pop(key)
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(content):
        if block["type"] == "text":
            events.append(
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
            )
            for piece in completion.pieces[: completion.content_token_count]:
                events.append(
                    {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
                )
        else:
            events.append({"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}})
            arguments = json.dumps(block["input"])
            for begin in range(0, len(arguments), 8):
                delta = {"type": "input_json_delta", "partial_json": arguments[begin : begin + 8]}
                events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    final_usage = {"output_tokens": usage["completion_tokens"]}
    delta_event = {"type": "message_delta", "delta": {"stop_reason": response["stop_reason"], "stop_sequence": None}}
    events.append({**delta_event, "usage": final_usage, **token_ids})
    events.append({"type": "message_stop"})
    return _Formatted(response, events)


_FORMATS: dict[str, Callable[[_Completion, dict[str, Any]], _Formatted]] = {
    "responses": _as_responses,
    "messages": _as_messages,
}


class OpenAITestServer:
    """OpenAI-compatible `/v1/chat/completions`, `/v1/responses`, `/v1/models` and Anthropic-style `/v1/messages`
    on 127.0.0.1, run in a thread.

    Use as a context manager (`with OpenAITestServer() as server: OpenAI(base_url=server.base_url, ...)`)
    or via `start()` / `stop()`. `requests` and `responses` record every call in order.
    `template_drift` re-renders earlier assistant turns differently (see `chat_prompt_token_ids`);
    `before_chunk(i)` is called (in a worker thread) before the i-th SSE event of a stream is sent.
    `strict_model` answers only its own model name, as vLLM does: any other `model` gets vLLM's 404.
    """

    def __init__(
        self,
        respond: Optional[Responder] = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "test-model",
        always_return_token_ids: bool = False,
        template_drift: bool = False,
        before_chunk: Optional[Callable[[int], None]] = None,
        strict_model: bool = False,
    ) -> None:
        self.strict_model = strict_model
        self.respond: Responder = respond or echo_responder
        self.template_drift = template_drift
        self.before_chunk = before_chunk
        self.host = host
        self.port = port
        self.model = model
        self.always_return_token_ids = always_return_token_ids
        self.requests: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.rejected_models: list[str] = []
        """Model names refused with 404 (`strict_model`)."""
        self._lock = threading.Lock()
        self._server: Optional[uvicorn.Server] = None
        self._thread: Optional[threading.Thread] = None
        self.app = self._build_app()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # ---- HTTP ----

    def _unknown_model(self, body: dict[str, Any]) -> Optional[JSONResponse]:
        """vLLM's answer to a model name it does not serve (only with `strict_model`)."""
        if not self.strict_model or body.get("model") == self.model:
            return None
        with self._lock:
            self.rejected_models.append(str(body.get("model")))
        message = f"The model `{body.get('model')}` does not exist."
        return JSONResponse({"error": {"message": message, "type": "NotFoundError", "param": None, "code": 404}}, 404)

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="agentlightning OpenAI test server")

        @app.get("/v1/models")
        async def list_models() -> dict[str, Any]:  # pyright: ignore[reportUnusedFunction]
            return {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "agentlightning-tests"}],
            }

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
            try:
                body = await request.json()
            except ValueError:
                return JSONResponse({"error": {"message": "body is not JSON", "type": "invalid_request"}}, 400)
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                return JSONResponse({"error": {"message": "'messages' must be a list", "type": "invalid_request"}}, 400)
            unknown = self._unknown_model(body)
            if unknown is not None:
                return unknown
            with self._lock:
                self.requests.append(body)
            reply = _coerce_reply(self.respond(body))
            if isinstance(reply, ErrorReply):
                return JSONResponse({"error": {"message": reply.message, "type": "scripted"}}, reply.status_code)
            completion = self._complete(body, reply)
            with self._lock:
                self.responses.append(completion.to_response())
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                events = completion.stream_events(include_usage, self.before_chunk)
                return StreamingResponse(events, media_type="text/event-stream")
            return completion.to_response()

        @app.post("/v1/responses")
        async def responses(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
            body = await _json_body(request)
            if body is None or not isinstance(body.get("input"), (str, list)):
                message = "'input' must be a string or a list of input items"
                return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, 400)
            return self._answer_other_format(body, _responses_as_chat(body), "responses")

        @app.post("/v1/messages")
        async def messages(request: Request) -> Any:  # pyright: ignore[reportUnusedFunction]
            body = await _json_body(request)
            max_tokens = None if body is None else body.get("max_tokens")
            if body is None or not isinstance(body.get("messages"), list) or not isinstance(max_tokens, int):
                message = "'messages' must be a list and 'max_tokens' an integer"
                error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
                return JSONResponse(error, 400)
            return self._answer_other_format(body, _messages_as_chat(body), "messages")

        return app

    def _answer_other_format(self, body: dict[str, Any], chat: dict[str, Any], route: str) -> Any:
        unknown = self._unknown_model(body)
        if unknown is not None:
            return unknown
        with self._lock:
            self.requests.append(body)
        reply = _coerce_reply(self.respond(chat))
        if isinstance(reply, ErrorReply):
            if route == "messages":
                error = {"type": "error", "error": {"type": "api_error", "message": reply.message}}
                return JSONResponse(error, reply.status_code)
            return JSONResponse({"error": {"message": reply.message, "type": "scripted"}}, reply.status_code)
        completion = self._complete(chat, reply)
        formatted = _FORMATS[route](completion, body)
        with self._lock:
            self.responses.append(formatted.response)
        if body.get("stream"):
            return StreamingResponse(formatted.events(self.before_chunk), media_type="text/event-stream")
        return formatted.response

    def _complete(self, body: dict[str, Any], reply: Reply) -> _Completion:
        tool_calls = [
            {
                "id": call.id or f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments),
                },
            }
            for call in reply.tool_calls
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        finish_reason = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
        content_pieces, tool_pieces = _message_pieces(message)
        return _Completion(
            id=f"chatcmpl-{uuid.uuid4().hex[:24]}",
            model=reply.model or str(body.get("model") or self.model),
            created=int(time.time()),
            message=message,
            finish_reason=finish_reason,
            prompt_token_ids=chat_prompt_token_ids(body["messages"], template_drift=self.template_drift),
            response_token_ids=reply_token_ids(message),
            pieces=[*content_pieces, *tool_pieces, "<end>"],
            content_token_count=len(content_pieces),
            with_token_ids=bool(body.get("return_token_ids")) or self.always_return_token_ids,
            with_logprobs=bool(body.get("logprobs")),
            n=int(body.get("n") or 1),
        )

    # ---- lifecycle ----

    def start(self) -> OpenAITestServer:
        # proto=IPPROTO_TCP so asyncio sets TCP_NODELAY on accepted connections (else each response pays
        # Nagle + delayed ACK, about 40 ms).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="openai-test-server", daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"OpenAI test server failed to start on {self.host}:{self.port}")
            time.sleep(0.01)
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def __enter__(self) -> OpenAITestServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="test-model")
    parser.add_argument("--return-token-ids", action="store_true", help="always return vLLM-style token ids")
    args = parser.parse_args(argv)
    server = OpenAITestServer(
        host=args.host, port=args.port, model=args.model, always_return_token_ids=args.return_token_ids
    )
    server.start()
    print(f"OpenAI-compatible test server at {server.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
