"""Anthropic Messages API <-> chat completions, as plain JSON dicts.

Used by the Anthropic instrumentation (a Messages call is recorded with the same `gen_ai.*` attributes
as a chat completion) and by the LLM proxy to serve `/v1/messages` (a Claude-Code-style agent) from a
backend that only speaks chat completions. Token ids ride along as top-level `prompt_token_ids` and
`token_ids` on the Message object.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any, Optional

from .responses import as_dict as _as_dict

__all__ = [
    "MessagesTranslationError",
    "messages_request_to_chat",
    "chat_response_to_messages",
    "messages_response_to_chat",
    "ChatToMessagesStream",
    "MessagesStreamAccumulator",
    "STOP_REASONS",
]

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
"""Chat-completions finish reason -> Anthropic stop reason."""
_FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
_PASSTHROUGH_FIELDS = ("model", "temperature", "top_p", "top_k", "stream", "return_token_ids", "logprobs", "seed")


class MessagesTranslationError(ValueError):
    """A Messages request that cannot be expressed as chat completions (the message names the field)."""


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(_as_dict(b).get("text", "")) for b in content or [] if _as_dict(b).get("type") == "text")


def _image_part(block: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    source = _as_dict(block.get("source"))
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif source.get("type") == "url":
        url = str(source.get("url"))
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _convert_message(message: Mapping[str, Any], position: int, strict: bool) -> list[dict[str, Any]]:
    role = message.get("role")
    if strict and role not in ("user", "assistant"):
        raise MessagesTranslationError(f"messages[{position}].role must be 'user' or 'assistant', got {role!r}")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": str(role), "content": content}]
    if strict and not isinstance(content, list):
        raise MessagesTranslationError(f"messages[{position}].content must be a string or a list of content blocks")
    converted: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    for raw in content or []:
        block = _as_dict(raw)
        kind = block.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image":
            image = _image_part(block)
            if image is not None:
                parts.append(image)
        elif kind == "tool_use":
            arguments = block.get("input")
            tool_calls.append(
                {
                    "id": str(block.get("id")),
                    "type": "function",
                    "function": {"name": str(block.get("name")), "arguments": json.dumps(arguments or {})},
                }
            )
        elif kind == "tool_result":
            result = block.get("content")
            text = _text_of(result) if result is not None else ""
            if block.get("is_error"):
                text = f"Error: {text}"
            converted.append({"role": "tool", "tool_call_id": str(block.get("tool_use_id")), "content": text})
        elif kind in ("thinking", "redacted_thinking"):
            continue
        elif strict:
            raise MessagesTranslationError(f"messages[{position}] has a content block of type {kind!r}, not supported")
    if parts or tool_calls:
        text_only = all(p["type"] == "text" for p in parts)
        body: Any = "".join(p["text"] for p in parts) if text_only else parts
        chat: dict[str, Any] = {"role": str(role), "content": body if (body or not tool_calls) else None}
        if tool_calls:
            chat["tool_calls"] = tool_calls
        converted.append(chat)
    return converted


def _chat_tool_choice(choice: Any) -> Any:
    data = _as_dict(choice)
    kind = data.get("type")
    if kind == "any":
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": data.get("name")}}
    return "none" if kind == "none" else "auto"


def messages_request_to_chat(body: Mapping[str, Any], *, strict: bool = True) -> dict[str, Any]:
    """The chat-completions request equivalent to an Anthropic Messages request body.

    `strict=False` (instrumentation) skips what has no equivalent instead of raising.
    """
    raw_messages = body.get("messages")
    if strict:
        if not isinstance(raw_messages, list) or not raw_messages:
            raise MessagesTranslationError("the request needs 'messages', a non-empty list of {role, content}")
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise MessagesTranslationError(f"'max_tokens' must be a positive integer, got {max_tokens!r}")
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": _text_of(system)})
    for position, raw in enumerate(raw_messages or []):  # type: ignore[union-attr]
        message = _as_dict(raw)
        if strict and not message:
            raise MessagesTranslationError(f"messages[{position}] must be an object with 'role' and 'content'")
        messages.extend(_convert_message(message, position, strict))
    chat: dict[str, Any] = {"messages": messages}
    for key in _PASSTHROUGH_FIELDS:
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("max_tokens") is not None:
        chat["max_tokens"] = body["max_tokens"]
    if body.get("stop_sequences"):
        chat["stop"] = list(body["stop_sequences"])
    user = _as_dict(body.get("metadata")).get("user_id")
    if user:
        chat["user"] = str(user)
    tools: list[dict[str, Any]] = []
    for position, raw in enumerate(body.get("tools") or []):
        tool = _as_dict(raw)
        if tool.get("input_schema") is None:
            if strict:
                raise MessagesTranslationError(
                    f"tools[{position}] ({tool.get('name')!r}) has no input_schema; only custom tools translate "
                    "to chat completions"
                )
            continue
        function = {"name": tool.get("name"), "parameters": tool["input_schema"]}
        if tool.get("description"):
            function["description"] = tool["description"]
        tools.append({"type": "function", "function": function})
    if tools:
        chat["tools"] = tools
        if body.get("tool_choice") is not None:
            chat["tool_choice"] = _chat_tool_choice(body["tool_choice"])
            if _as_dict(body["tool_choice"]).get("disable_parallel_tool_use"):
                chat["parallel_tool_calls"] = False
    return chat


def _content_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(_as_dict(p).get("text", "")) for p in content)  # type: ignore[union-attr]
    if content:
        blocks.append({"type": "text", "text": str(content)})
    for raw in message.get("tool_calls") or []:
        call = _as_dict(raw)
        function = _as_dict(call.get("function"))
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = {"_raw_arguments": function.get("arguments")}
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}"),
                "name": str(function.get("name")),
                "input": arguments if isinstance(arguments, dict) else {"value": arguments},
            }
        )
    return blocks


def chat_response_to_messages(
    chat: Mapping[str, Any], request: Mapping[str, Any], *, message_id: Optional[str] = None
) -> dict[str, Any]:
    """An Anthropic `Message` for a chat-completions response (first choice), token ids kept."""
    choices = [_as_dict(c) for c in chat.get("choices") or []]
    choice = choices[0] if choices else {}
    usage = _as_dict(chat.get("usage"))
    message: dict[str, Any] = {
        "id": message_id or f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": str(chat.get("model") or request.get("model") or ""),
        "content": _content_blocks(_as_dict(choice.get("message"))),
        "stop_reason": STOP_REASONS.get(str(choice.get("finish_reason")), "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": int(usage.get("prompt_tokens") or 0),
            "output_tokens": int(usage.get("completion_tokens") or 0),
        },
    }
    prompt_token_ids = chat.get("prompt_token_ids") or choice.get("prompt_token_ids")
    if isinstance(prompt_token_ids, list):
        message["prompt_token_ids"] = prompt_token_ids
    if isinstance(choice.get("token_ids"), list):
        message["token_ids"] = choice["token_ids"]
    logprobs = _as_dict(choice.get("logprobs")).get("content")
    if isinstance(logprobs, list):
        message["logprobs"] = {"content": logprobs}  # an extension, like the token ids
    return message


def messages_response_to_chat(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat-completions response dict for an Anthropic `Message` (for `response_to_attributes`)."""
    text: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for raw in message.get("content") or []:
        block = _as_dict(raw)
        if block.get("type") == "text":
            text.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            tool_calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": json.dumps(block.get("input") or {})},
                }
            )
    chat_message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text else None}
    if tool_calls:
        chat_message["tool_calls"] = tool_calls
    choice: dict[str, Any] = {
        "index": 0,
        "message": chat_message,
        "finish_reason": _FINISH_REASONS.get(str(message.get("stop_reason")), message.get("stop_reason")),
    }
    if isinstance(message.get("token_ids"), list):
        choice["token_ids"] = message["token_ids"]
    logprobs = _as_dict(message.get("logprobs")).get("content")
    if isinstance(logprobs, list):
        choice["logprobs"] = {"content": logprobs}
    usage = _as_dict(message.get("usage"))
    chat: dict[str, Any] = {"id": message.get("id"), "model": message.get("model"), "choices": [choice]}
    if usage:
        prompt, completion = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
        chat["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if isinstance(message.get("prompt_token_ids"), list):
        chat["prompt_token_ids"] = message["prompt_token_ids"]
    return chat


class ChatToMessagesStream:
    """Turns a chat-completions chunk stream into Anthropic stream events as chunks arrive.

    Text is relayed delta by delta; tool calls are sent as whole `tool_use` blocks once complete.
    """

    def __init__(self, request: Mapping[str, Any]) -> None:
        self.request = request
        self.message_id = f"msg_{uuid.uuid4().hex[:24]}"
        self._started = False
        self._text_open = False

    def start(self, model: Optional[str] = None) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        message = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": model or str(self.request.get("model") or ""),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [{"type": "message_start", "message": message}]

    def add_chunk(self, chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
        events = self.start(chunk.get("model"))
        for raw_choice in chunk.get("choices") or []:
            choice = _as_dict(raw_choice)
            text = _as_dict(choice.get("delta")).get("content")
            if choice.get("index", 0) != 0 or not text:
                continue
            if not self._text_open:
                self._text_open = True
                events.append(
                    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
                )
            events.append({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
        return events

    def finish(self, chat_response: Mapping[str, Any]) -> list[dict[str, Any]]:
        events = self.start(chat_response.get("model"))
        message = chat_response_to_messages(chat_response, self.request, message_id=self.message_id)
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                if not self._text_open:
                    start = {"type": "text", "text": ""}
                    events.append({"type": "content_block_start", "index": index, "content_block": start})
                    delta = {"type": "text_delta", "text": block["text"]}
                    events.append({"type": "content_block_delta", "index": index, "delta": delta})
            else:
                start = {**block, "input": {}}
                events.append({"type": "content_block_start", "index": index, "content_block": start})
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                events.append({"type": "content_block_delta", "index": index, "delta": delta})
            events.append({"type": "content_block_stop", "index": index})
        final_delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": message["usage"],
        }
        for key in ("prompt_token_ids", "token_ids", "logprobs"):
            if key in message:
                final_delta[key] = message[key]
        events.append(final_delta)
        events.append({"type": "message_stop"})
        return events


class MessagesStreamAccumulator:
    """Rebuilds the final Anthropic `Message` from its stream events (text, tool_use input, usage, token ids)."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, str] = {}

    def add(self, event: Any) -> None:
        data = _as_dict(event)
        kind = data.get("type")
        if kind == "message_start":
            self.message = _as_dict(data.get("message"))
        elif kind == "content_block_start":
            self._blocks[int(data.get("index") or 0)] = _as_dict(data.get("content_block"))
        elif kind == "content_block_delta":
            index = int(data.get("index") or 0)
            block = self._blocks.setdefault(index, {"type": "text", "text": ""})
            delta = _as_dict(data.get("delta"))
            if delta.get("type") == "text_delta":
                block["text"] = str(block.get("text") or "") + str(delta.get("text") or "")
            elif delta.get("type") == "input_json_delta":
                self._json[index] = self._json.get(index, "") + str(delta.get("partial_json") or "")
        elif kind == "message_delta":
            self.message.update({k: v for k, v in _as_dict(data.get("delta")).items() if v is not None})
            usage = _as_dict(data.get("usage"))
            merged = _as_dict(self.message.get("usage"))
            merged.update({k: v for k, v in usage.items() if v is not None})
            self.message["usage"] = merged
            for key in ("prompt_token_ids", "token_ids"):
                if isinstance(data.get(key), list):
                    self.message[key] = data[key]
            if isinstance(data.get("logprobs"), Mapping):
                self.message["logprobs"] = data["logprobs"]

    def to_message(self) -> dict[str, Any]:
        message = dict(self.message)
        blocks: list[dict[str, Any]] = []
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            if block.get("type") == "tool_use" and index in self._json:
                try:
                    block["input"] = json.loads(self._json[index] or "{}")
                except ValueError:
                    block["input"] = {"_raw_arguments": self._json[index]}
            blocks.append(block)
        message["content"] = blocks
        return message

    to_response = to_message
