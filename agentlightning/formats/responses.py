"""OpenAI Responses API <-> chat completions, as plain JSON dicts.

Used by the OpenAI instrumentation (a Responses call is recorded with the same `gen_ai.*` attributes as a
chat completion), and by the LLM proxy to serve `/v1/responses` from a backend that only speaks chat
completions (vLLM with token ids, our policy server). Token ids ride along as vLLM names them: top-level
`prompt_token_ids` and `token_ids` (the generated tokens) on the Response object.

Only function tools translate to chat completions; hosted tools (web search, file search...) and
`previous_response_id` need OpenAI's own service and raise `ResponsesTranslationError` (strict mode).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, Optional

__all__ = [
    "ResponsesTranslationError",
    "responses_request_to_chat",
    "chat_response_to_responses",
    "responses_response_to_chat",
    "responses_stream_events",
    "ChatToResponsesStream",
    "ResponsesStreamAccumulator",
]

# Chat-completions fields copied as they are from a Responses request (vLLM extras included).
_PASSTHROUGH_FIELDS = (
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "stream",
    "seed",
    "stop",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "return_token_ids",
    "logprobs",
    "top_logprobs",
    "n",
)
# Responses fields that only concern OpenAI's service (storage, billing); dropped when translating.
_SERVICE_FIELDS = frozenset(
    {
        "store",
        "metadata",
        "include",
        "service_tier",
        "truncation",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "stream_options",
        "reasoning",
        "max_tool_calls",
        "background",
        "context_management",
    }
)
_FINISH_TO_STATUS = {"length": ("incomplete", "max_output_tokens"), "content_filter": ("incomplete", "content_filter")}


class ResponsesTranslationError(ValueError):
    """A Responses request that has no chat-completions equivalent (the message names the field)."""


def as_dict(value: Any) -> dict[str, Any]:
    """A mapping or pydantic model as a plain dict; anything else (None included) as `{}`."""
    if isinstance(value, Mapping):
        return dict(value)  # type: ignore[arg-type]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump()  # type: ignore[no-any-return]
    return {}


def _part_text(part: Any) -> Optional[str]:
    if isinstance(part, str):
        return part
    data = as_dict(part)
    if data.get("type") in ("input_text", "output_text", "text", "refusal", "summary_text"):
        return str(data.get("text", data.get("refusal", "")))
    return None


def _chat_content(content: Any) -> Any:
    """Responses message content (string or parts) as chat content (string, or parts with images)."""
    if content is None or isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for raw in content:
        data = as_dict(raw)
        text = _part_text(raw)
        if text is not None:
            parts.append({"type": "text", "text": text})
        elif data.get("type") == "input_image" and data.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": data["image_url"]}})
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def _input_messages(items: Any, *, strict: bool) -> list[dict[str, Any]]:
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    for position, raw in enumerate(items):
        item = as_dict(raw)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            messages.append({"role": str(item.get("role") or "user"), "content": _chat_content(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": str(item.get("call_id") or item.get("id") or f"call_{position}"),
                "type": "function",
                "function": {"name": str(item.get("name")), "arguments": str(item.get("arguments") or "{}")},
            }
            last = messages[-1] if messages else None
            # The calls of one response follow its text (a thinking model's reasoning, a preamble): one
            # assistant turn, as the model wrote it, not a text turn and a second, call-only turn.
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id")),
                    "content": output if isinstance(output, str) else _chat_content(output),
                }
            )
        elif kind in ("reasoning", "item_reference"):
            continue  # reasoning is not replayed to chat models; references need OpenAI's stored items
        elif strict:
            raise ResponsesTranslationError(
                f"input[{position}] has type {kind!r}, which a chat-completions backend cannot take; use message, "
                "function_call and function_call_output items"
            )
    return messages


def _chat_tools(tools: Any, *, strict: bool) -> list[dict[str, Any]]:
    converted: list[dict[str, Any]] = []
    for position, raw in enumerate(tools or []):
        tool = as_dict(raw)
        if tool.get("type") == "function":
            function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
            converted.append({"type": "function", "function": function})
        elif strict:
            raise ResponsesTranslationError(
                f"tools[{position}] has type {tool.get('type')!r}; only function tools translate to chat completions"
            )
    return converted


def _chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    data = as_dict(choice)
    if data.get("type") == "function" and data.get("name"):
        return {"type": "function", "function": {"name": data["name"]}}
    return data.get("mode", "auto") if data.get("type") == "allowed_tools" else "auto"


def _response_format(text: Any) -> Optional[dict[str, Any]]:
    fmt = as_dict(as_dict(text).get("format"))
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": schema}
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    return None


def responses_request_to_chat(body: Mapping[str, Any], *, strict: bool = True) -> dict[str, Any]:
    """The chat-completions request equivalent to a Responses request body.

    `strict=False` (instrumentation) skips what has no equivalent instead of raising.
    """
    if strict and body.get("previous_response_id"):
        raise ResponsesTranslationError(
            "previous_response_id needs responses stored by OpenAI's service; send the whole conversation in 'input'"
        )
    if strict and body.get("input") is None:
        raise ResponsesTranslationError("the request needs 'input' (a string or a list of input items)")
    if strict and not isinstance(body.get("input"), (str, list)):
        raise ResponsesTranslationError(f"'input' must be a string or a list of items, got {body.get('input')!r}")
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    messages.extend(_input_messages(body.get("input"), strict=strict))
    chat: dict[str, Any] = {"messages": messages}
    if body.get("model") is not None:
        chat["model"] = body["model"]
    for key in _PASSTHROUGH_FIELDS:
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    tools = _chat_tools(body.get("tools"), strict=strict)
    if tools:
        chat["tools"] = tools
        if body.get("tool_choice") is not None:
            chat["tool_choice"] = _chat_tool_choice(body["tool_choice"])
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    return chat


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _usage(chat_usage: Any) -> Optional[dict[str, Any]]:
    usage = as_dict(chat_usage)
    if not usage:
        return None
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
    }


def _output_items(
    message: Mapping[str, Any], ids: Optional[dict[str, str]] = None, logprobs: Optional[list[Any]] = None
) -> list[dict[str, Any]]:
    ids = ids if ids is not None else {}
    items: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(as_dict(p).get("text", "")) for p in content)  # type: ignore[union-attr]
    if content or not message.get("tool_calls"):
        items.append(
            {
                "type": "message",
                "id": ids.setdefault("message", _new_id("msg")),
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": str(content or ""), "annotations": [], "logprobs": logprobs or []}
                ],
            }
        )
    for index, raw_call in enumerate(message.get("tool_calls") or []):
        call = as_dict(raw_call)
        function = as_dict(call.get("function"))
        items.append(
            {
                "type": "function_call",
                "id": ids.setdefault(f"call{index}", _new_id("fc")),
                "call_id": str(call.get("id") or _new_id("call")),
                "name": str(function.get("name")),
                "arguments": str(function.get("arguments") or "{}"),
                "status": "completed",
            }
        )
    return items


def chat_response_to_responses(
    chat: Mapping[str, Any], request: Mapping[str, Any], *, ids: Optional[dict[str, str]] = None
) -> dict[str, Any]:
    """A Responses `Response` object for a chat-completions response (first choice), token ids kept.

    `ids` fixes the ids of the response and its output items (a stream announces them before the end).
    """
    ids = ids if ids is not None else {}
    choices = [as_dict(c) for c in chat.get("choices") or []]
    choice = choices[0] if choices else {}
    message = as_dict(choice.get("message"))
    status, reason = _FINISH_TO_STATUS.get(str(choice.get("finish_reason")), ("completed", None))
    response: dict[str, Any] = {
        "id": ids.setdefault("response", _new_id("resp")),
        "object": "response",
        "created_at": int(chat.get("created") or time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": reason} if reason else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": str(chat.get("model") or request.get("model") or ""),
        "output": _output_items(message, ids, as_dict(choice.get("logprobs")).get("content")),
        "parallel_tool_calls": bool(request.get("parallel_tool_calls", True)),
        "temperature": request.get("temperature"),
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": list(request.get("tools") or []),
        "top_p": request.get("top_p"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "usage": _usage(chat.get("usage")),
    }
    prompt_token_ids = chat.get("prompt_token_ids") or choice.get("prompt_token_ids")
    if isinstance(prompt_token_ids, list):
        response["prompt_token_ids"] = prompt_token_ids
    if isinstance(choice.get("token_ids"), list):
        response["token_ids"] = choice["token_ids"]
    return response


def responses_response_to_chat(response: Mapping[str, Any]) -> dict[str, Any]:
    """A chat-completions response dict for a Responses `Response` (for `response_to_attributes`)."""
    content: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    logprobs: list[Any] = []
    for raw in response.get("output") or []:
        item = as_dict(raw)
        if item.get("type") == "message":
            content.extend(t for t in (_part_text(p) for p in item.get("content") or []) if t is not None)
            logprobs.extend(entry for p in item.get("content") or [] for entry in as_dict(p).get("logprobs") or [])
        elif item.get("type") == "function_call":
            tool_calls.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")},
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) if content else None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    incomplete = as_dict(response.get("incomplete_details")).get("reason")
    finish = "tool_calls" if tool_calls else "length" if incomplete == "max_output_tokens" else "stop"
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
    if logprobs:
        choice["logprobs"] = {"content": [as_dict(entry) for entry in logprobs]}
    if isinstance(response.get("token_ids"), list):
        choice["token_ids"] = response["token_ids"]
    usage = as_dict(response.get("usage"))
    chat: dict[str, Any] = {"id": response.get("id"), "model": response.get("model"), "choices": [choice]}
    if usage:
        chat["usage"] = {
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
            "total_tokens": usage.get("total_tokens"),
        }
    if isinstance(response.get("prompt_token_ids"), list):
        chat["prompt_token_ids"] = response["prompt_token_ids"]
    return chat


class ChatToResponsesStream:
    """Turns a chat-completions chunk stream into Responses stream events as chunks arrive.

    Text is relayed delta by delta; function calls are announced once complete. `finish(chat_response)`
    (the accumulated chat response) closes the open items and ends with `response.completed`.
    """

    def __init__(self, request: Mapping[str, Any]) -> None:
        self.request = request
        self.ids: dict[str, str] = {}
        self._sequence = 0
        self._started = False
        self._text_open = False

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _skeleton(self, status: str) -> dict[str, Any]:
        empty = {"choices": [{"message": {"role": "assistant", "content": ""}}]}
        response = chat_response_to_responses(empty, self.request, ids=dict(self.ids))
        response.update({"status": status, "output": [], "usage": None})
        return response

    def start(self) -> list[dict[str, Any]]:
        if self._started:
            return []
        self._started = True
        self.ids.setdefault("response", _new_id("resp"))
        skeleton = self._skeleton("in_progress")
        return [
            self._event("response.created", response=skeleton),
            self._event("response.in_progress", response=skeleton),
        ]

    def add_chunk(self, chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
        events = self.start()
        for raw_choice in chunk.get("choices") or []:
            choice = as_dict(raw_choice)
            if choice.get("index", 0) != 0:
                continue
            text = as_dict(choice.get("delta")).get("content")
            if not text:
                continue
            if not self._text_open:
                self._text_open = True
                item = {
                    "type": "message",
                    "id": self.ids.setdefault("message", _new_id("msg")),
                    "role": "assistant",
                    "status": "in_progress",
                    "content": [],
                }
                events.append(self._event("response.output_item.added", output_index=0, item=item))
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                events.append(
                    self._event(
                        "response.content_part.added", item_id=item["id"], output_index=0, content_index=0, part=part
                    )
                )
            events.append(
                self._event(
                    "response.output_text.delta",
                    item_id=self.ids["message"],
                    output_index=0,
                    content_index=0,
                    delta=str(text),
                    logprobs=[],
                )
            )
        return events

    def finish(self, chat_response: Mapping[str, Any]) -> list[dict[str, Any]]:
        events = self.start()
        response = chat_response_to_responses(chat_response, self.request, ids=self.ids)
        for output_index, item in enumerate(response["output"]):
            opened = item["type"] == "message" and self._text_open
            events.extend(self._item_events(item, output_index, opened))
        terminal = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        events.append(self._event(terminal, response=response))
        return events

    def _item_events(self, item: dict[str, Any], output_index: int, opened: bool) -> list[dict[str, Any]]:
        """The events announcing (unless already `opened`), filling and closing one output item."""
        event = self._event
        events: list[dict[str, Any]] = []
        if not opened:
            events.append(
                event("response.output_item.added", output_index=output_index, item={**item, "status": "in_progress"})
            )
        if item["type"] == "message":
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": output_index, "content_index": 0}
            if not opened:
                events.append(event("response.content_part.added", **where, part={**part, "text": ""}))
                if part["text"]:
                    events.append(event("response.output_text.delta", **where, delta=part["text"], logprobs=[]))
            events.append(event("response.output_text.done", **where, text=part["text"], logprobs=[]))
            events.append(event("response.content_part.done", **where, part=part))
        else:
            where = {"item_id": item["id"], "output_index": output_index}
            events.append(event("response.function_call_arguments.delta", **where, delta=item["arguments"]))
            events.append(event("response.function_call_arguments.done", **where, arguments=item["arguments"]))
        events.append(event("response.output_item.done", output_index=output_index, item=item))
        return events


def responses_stream_events(response: Mapping[str, Any], request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Responses stream events of a complete chat-completions response (a stream replayed at once)."""
    stream = ChatToResponsesStream(request)
    return stream.finish(response)


class ResponsesStreamAccumulator:
    """The final `Response` of a Responses event stream (from `response.completed` / `.incomplete` / `.failed`)."""

    _FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

    def __init__(self) -> None:
        self.response: Optional[dict[str, Any]] = None
        self._text: list[str] = []

    def add(self, event: Any) -> None:
        data = as_dict(event)
        kind = data.get("type")
        if kind in self._FINAL:
            self.response = as_dict(data.get("response"))
        elif kind == "response.output_text.delta":
            self._text.append(str(data.get("delta") or ""))
        elif kind == "response.created" and self.response is None:
            self.response = as_dict(data.get("response"))

    def to_response(self) -> dict[str, Any]:
        """The final response; for a stream cut short, what arrived (text deltas as one message)."""
        response = dict(self.response or {})
        if response.get("status") in (None, "in_progress") and self._text:
            response["output"] = [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "".join(self._text)}],
                }
            ]
        return response


def sse_encode(event: Mapping[str, Any]) -> bytes:
    """One Responses/Messages stream event as SSE bytes (`event:` line named after its type)."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def iter_sse_encoded(events: list[dict[str, Any]]) -> Iterator[bytes]:
    for event in events:
        yield sse_encode(event)
