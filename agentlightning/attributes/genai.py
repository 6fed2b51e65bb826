"""OpenTelemetry GenAI semantic conventions: today's names next to our v0.3 ones, and messages both ways.

Our LLM spans keep the v0.3 attributes (`gen_ai.system`, `gen_ai.prompt.<i>.*`, `gen_ai.completion.<i>.*`,
`gen_ai.usage.prompt_tokens`, `prompt_token_ids`...). With `OTEL_SEMCONV_STABILITY_OPT_IN` containing
`gen_ai_latest_experimental` they also carry the current GenAI names (`gen_ai.operation.name`,
`gen_ai.provider.name`, `gen_ai.usage.input_tokens`, `gen_ai.input.messages` / `gen_ai.output.messages` as
JSON with typed parts) and the token ids under `agentlightning.*` (see docs/genai-conventions.md).

Reading goes the other way: spans from the official instrumentations, whatever the convention version,
yield OpenAI chat messages (`to_openai_messages`, `event_messages`) for the adapters.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from agentlightning.types import Attributes, Event

__all__ = [
    "SEMCONV_OPT_IN_ENV_VAR",
    "LATEST_EXPERIMENTAL",
    "AGL_PROMPT_TOKEN_IDS",
    "AGL_RESPONSE_TOKEN_IDS",
    "AGL_LOGPROBS",
    "AGL_TOKEN_IDS_SOURCE",
    "AGL_LOSS_MASK",
    "AGL_LOG_EVENT",
    "AGL_LOG_EVENT_BODY",
    "latest_genai_enabled",
    "latest_genai_attributes",
    "to_genai_messages",
    "to_openai_messages",
    "system_instructions_message",
    "event_messages",
]

SEMCONV_OPT_IN_ENV_VAR = "OTEL_SEMCONV_STABILITY_OPT_IN"
LATEST_EXPERIMENTAL = "gen_ai_latest_experimental"

AGL_PROMPT_TOKEN_IDS = "agentlightning.gen_ai.prompt_token_ids"
"""Extension: the prompt's token ids (v0.3 name: `prompt_token_ids`)."""
AGL_RESPONSE_TOKEN_IDS = "agentlightning.gen_ai.response_token_ids"
"""Extension: the first choice's token ids (v0.3 name: `response_token_ids`)."""
AGL_LOGPROBS = "agentlightning.gen_ai.logprobs"
"""Extension: the first choice's `logprobs.content` as JSON (v0.3 name: `logprobs.content`)."""
AGL_TOKEN_IDS_SOURCE = "agentlightning.gen_ai.token_ids_source"
"""Extension: "recorded" (from the model server) when token ids are present."""
AGL_LOSS_MASK = "agentlightning.gen_ai.loss_mask"
"""Extension: per-token loss mask of `response_token_ids` (1 = generated and trained, 0 = context), written by
`agentlightning.export.import_rows` for rows that merged several turns."""
AGL_LOG_EVENT = "agentlightning.log_event"
"""Marks a stored record that arrived as an OTLP log event (e.g. `gen_ai.user.message`) of its parent span."""
AGL_LOG_EVENT_BODY = "agentlightning.log_event.body"
"""The log event's body, as JSON."""

_V03_USAGE = {"prompt_tokens": "input_tokens", "completion_tokens": "output_tokens"}


def latest_genai_enabled() -> bool:
    """Whether `OTEL_SEMCONV_STABILITY_OPT_IN` opts into the latest experimental GenAI conventions."""
    raw = os.environ.get(SEMCONV_OPT_IN_ENV_VAR, "")
    return LATEST_EXPERIMENTAL in {item.strip() for item in raw.split(",")}


# ---- OpenAI chat messages -> GenAI messages ----


def _loads(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _text_parts(content: Any) -> list[dict[str, Any]]:
    content = _loads(content)
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[dict[str, Any]] = []
    for item in content if isinstance(content, list) else [content]:  # type: ignore[union-attr]
        if not isinstance(item, Mapping):
            parts.append({"type": "text", "content": str(item)})  # type: ignore[arg-type]
        elif item.get("type") == "text" or "text" in item:
            parts.append({"type": "text", "content": str(item.get("text", ""))})
        elif item.get("type") == "image_url":
            image = item.get("image_url")
            url = image.get("url") if isinstance(image, Mapping) else image  # type: ignore[union-attr]
            parts.append({"type": "uri", "modality": "image", "uri": str(url)})
        else:
            parts.append({"type": str(item.get("type", "unknown")), **{k: v for k, v in item.items() if k != "type"}})
    return parts


def _tool_call_parts(tool_calls: Any) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for call in _loads(tool_calls) or []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function") if isinstance(call.get("function"), Mapping) else call
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),  # type: ignore[union-attr]
                "arguments": _loads(function.get("arguments")),  # type: ignore[union-attr]
            }
        )
    return parts


def to_genai_messages(
    messages: Sequence[Mapping[str, Any]], finish_reasons: Sequence[Any] = ()
) -> list[dict[str, Any]]:
    """OpenAI chat messages as GenAI messages (`{"role", "parts": [...]}`, outputs with `finish_reason`)."""
    converted: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        role = str(message.get("role") or "assistant")
        if role == "tool":
            parts: list[dict[str, Any]] = [
                {"type": "tool_call_response", "id": message.get("tool_call_id"), "response": message.get("content")}
            ]
        else:
            parts = _text_parts(message.get("content")) + _tool_call_parts(message.get("tool_calls"))
        item: dict[str, Any] = {"role": role, "parts": parts}
        if message.get("name"):
            item["name"] = message["name"]
        if index < len(finish_reasons) and finish_reasons[index] is not None:
            item["finish_reason"] = finish_reasons[index]
        converted.append(item)
    return converted


# ---- GenAI messages -> OpenAI chat messages ----


def _is_genai_message(item: Any) -> bool:
    return isinstance(item, Mapping) and isinstance(item.get("parts"), list)


def _part_text(part: Mapping[str, Any]) -> Optional[str]:
    if part.get("type") in ("text", "reasoning", None) and part.get("content") is not None:
        return str(part["content"])
    return None


def _openai_message(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One GenAI message as OpenAI messages (a tool message with several responses becomes several)."""
    role = str(message.get("role") or "user")
    parts = [p for p in message.get("parts") or [] if isinstance(p, Mapping)]
    responses = [p for p in parts if p.get("type") == "tool_call_response"]
    if responses:
        return [
            {"role": "tool", "tool_call_id": p.get("id"), "content": _as_text(p.get("response"))} for p in responses
        ]
    texts = [text for p in parts if (text := _part_text(p)) is not None]
    images = [p for p in parts if p.get("type") == "uri" and p.get("modality") == "image"]
    content: Any = "".join(texts)
    if images:
        content = [{"type": "text", "text": t} for t in texts] + [
            {"type": "image_url", "image_url": {"url": p.get("uri")}} for p in images
        ]
    converted: dict[str, Any] = {"role": role, "content": content}
    calls = [p for p in parts if p.get("type") == "tool_call"]
    if calls:
        converted["tool_calls"] = [
            {
                "id": p.get("id"),
                "type": "function",
                "function": {"name": p.get("name"), "arguments": _as_text(p.get("arguments"))},
            }
            for p in calls
        ]
        if not texts:
            converted["content"] = None
    if message.get("name"):
        converted["name"] = message["name"]
    if message.get("finish_reason") is not None:
        converted["finish_reason"] = message["finish_reason"]
    return [converted]


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def to_openai_messages(messages: Any) -> Any:
    """GenAI messages (JSON text or list) as OpenAI chat messages; anything else is returned unchanged."""
    messages = _loads(messages)
    if not isinstance(messages, list) or not messages or not all(_is_genai_message(m) for m in messages):  # type: ignore[arg-type]
        return messages
    return [converted for message in messages for converted in _openai_message(message)]  # type: ignore[union-attr]


def system_instructions_message(value: Any) -> Optional[dict[str, Any]]:
    """`gen_ai.system_instructions` (JSON list of parts) as a system message, or None."""
    parts = _loads(value)
    if isinstance(parts, str):
        return {"role": "system", "content": parts}
    if not isinstance(parts, list):
        return None
    texts = [text for p in parts if isinstance(p, Mapping) and (text := _part_text(p)) is not None]  # type: ignore[union-attr]
    return {"role": "system", "content": "".join(texts)} if texts else None


# ---- messages carried by events (span events, or OTLP log events folded into their span) ----

_ROLE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_DETAILS_EVENT = "gen_ai.client.inference.operation.details"


def _event_body(event: Event) -> dict[str, Any]:
    """The event's body: JSON kept by the log ingestion, `event.body`, or the attributes themselves."""
    attributes = dict(event.attributes)
    for key in (AGL_LOG_EVENT_BODY, "event.body", "body"):
        body = _loads(attributes.get(key))
        if isinstance(body, Mapping):
            return dict(body)  # type: ignore[arg-type]
    nested: dict[str, Any] = {}
    for key, value in attributes.items():  # `message.content`, `message.tool_calls` flattened by OTLP
        head, _, rest = key.partition(".")
        if rest and head == "message":
            nested.setdefault("message", {})[rest] = value
        else:
            nested[key] = value
    return nested


def _role_message(role: str, body: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": str(body.get("role") or role), "content": _loads(body.get("content"))}
    if body.get("tool_calls"):
        message["tool_calls"] = _openai_tool_calls(body.get("tool_calls"))
    if role == "tool":
        message["tool_call_id"] = body.get("id") or body.get("tool_call_id")
    return message


def _openai_tool_calls(tool_calls: Any) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    for call in _loads(tool_calls) or []:
        if isinstance(call, Mapping):
            function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
            calls.append(
                {
                    "id": call.get("id"),
                    "type": "function",
                    "function": {
                        "name": function.get("name"),  # type: ignore[union-attr]
                        "arguments": _as_text(_loads(function.get("arguments"))),  # type: ignore[union-attr]
                    },
                }
            )
    return calls


def event_messages(events: Sequence[Event]) -> tuple[Optional[list[Any]], Optional[list[Any]]]:
    """Prompt and completion messages carried by a span's events (None where the events carry none).

    Understands the per-message events of GenAI conventions 1.27-1.36 (`gen_ai.<role>.message`,
    `gen_ai.choice`), the older `gen_ai.content.prompt` / `gen_ai.content.completion` events, and the
    current `gen_ai.client.inference.operation.details` event.
    """
    prompt: list[Any] = []
    choices: list[tuple[int, dict[str, Any]]] = []
    for event in sorted(events, key=lambda e: e.timestamp or 0.0):
        body = _event_body(event)
        if event.name in _ROLE_EVENTS:
            prompt.append(_role_message(_ROLE_EVENTS[event.name], body))
        elif event.name == "gen_ai.choice":
            message = body.get("message") if isinstance(body.get("message"), Mapping) else {}
            choice = _role_message("assistant", message)  # type: ignore[arg-type]
            if body.get("finish_reason") is not None:
                choice["finish_reason"] = body["finish_reason"]
            index = body.get("index")
            choices.append((index if isinstance(index, int) else len(choices), choice))
        elif event.name == "gen_ai.content.prompt":
            prompt.extend(to_openai_messages(body.get("gen_ai.prompt")) or [])
        elif event.name == "gen_ai.content.completion":
            completion = to_openai_messages(body.get("gen_ai.completion"))
            choices.extend(enumerate(completion if isinstance(completion, list) else []))  # type: ignore[arg-type]
        elif event.name == _DETAILS_EVENT:
            instructions = system_instructions_message(body.get("gen_ai.system_instructions"))
            prompt.extend([instructions] if instructions else [])
            prompt.extend(to_openai_messages(body.get("gen_ai.input.messages")) or [])
            output = to_openai_messages(body.get("gen_ai.output.messages"))
            choices.extend(enumerate(output if isinstance(output, list) else []))  # type: ignore[arg-type]
    completion = [choice for _, choice in sorted(choices, key=lambda pair: pair[0])]
    return (prompt or None), (completion or None)


# ---- our v0.3 attributes -> the latest GenAI attributes ----


def _indexed(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """`prefix.<i>.<field>` attributes as a list of dicts ordered by i (tool calls nested)."""
    by_index: dict[int, dict[str, Any]] = {}
    dotted = prefix + "."
    for key, value in attributes.items():
        if not key.startswith(dotted):
            continue
        index, _, field = key[len(dotted) :].partition(".")
        if not index.isdigit() or not field:
            continue
        entry = by_index.setdefault(int(index), {})
        if field.startswith("tool_calls."):
            call_index, _, call_field = field[len("tool_calls.") :].partition(".")
            if call_index.isdigit():
                calls = entry.setdefault("_calls", {})
                calls.setdefault(int(call_index), {})[call_field] = value
        else:
            entry[field] = value
    messages: list[dict[str, Any]] = []
    for index in sorted(by_index):
        entry = by_index[index]
        calls = entry.pop("_calls", {})
        if calls:
            entry["tool_calls"] = [
                {"id": c.get("id"), "function": {"name": c.get("name"), "arguments": c.get("arguments")}}
                for _, c in sorted(calls.items())
            ]
        messages.append(entry)
    return messages


def latest_genai_attributes(attributes: Mapping[str, Any]) -> Attributes:
    """The current GenAI names (and our `agentlightning.gen_ai.*` token-id extension) for v0.3 attributes.

    Works on a request's or a response's attributes alone, so a span can get each half as it is recorded.
    """
    latest: Attributes = {}
    if "gen_ai.system" in attributes:
        latest["gen_ai.provider.name"] = str(attributes["gen_ai.system"])
    request_type = attributes.get("gen_ai.request.type")
    if request_type is not None:
        latest["gen_ai.operation.name"] = "text_completion" if request_type == "completion" else "chat"
    prompt = _indexed(attributes, "gen_ai.prompt")
    if prompt:
        latest["gen_ai.input.messages"] = json.dumps(to_genai_messages(prompt))
    completion = _indexed(attributes, "gen_ai.completion")
    if completion:
        reasons = [c.get("finish_reason") for c in completion]
        latest["gen_ai.output.messages"] = json.dumps(to_genai_messages(completion, reasons))
        if any(r is not None for r in reasons):
            latest["gen_ai.response.finish_reasons"] = [str(r) for r in reasons if r is not None]
    for old, new in _V03_USAGE.items():
        value = attributes.get(f"gen_ai.usage.{old}")
        if isinstance(value, int):
            latest[f"gen_ai.usage.{new}"] = value
    for old, new in (("prompt_token_ids", AGL_PROMPT_TOKEN_IDS), ("response_token_ids", AGL_RESPONSE_TOKEN_IDS)):
        if old in attributes:
            latest[new] = attributes[old]
            latest[AGL_TOKEN_IDS_SOURCE] = "recorded"
    if "logprobs.content" in attributes:
        latest[AGL_LOGPROBS] = attributes["logprobs.content"]
    return latest
