"""Spans -> OpenAI chat conversations (`{messages, tools}`, the fine-tuning JSONL format), for APO and SFT."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, TypedDict, Union

from opentelemetry.sdk.trace import ReadableSpan

from agentlightning.attributes.otel import filter_and_unflatten_attributes
from agentlightning.types import Span

from .base import TraceAdapter, normalize_spans
from .llm_call import response_id_of
from .tree import span_start

__all__ = ["OpenAIMessages", "TraceToMessages"]

logger = logging.getLogger(__name__)

_MESSAGE_PREFIXES = ("gen_ai.prompt", "gen_ai.completion", "gen_ai.request", "gen_ai.response")


class OpenAIMessages(TypedDict):
    """One conversation: chat messages plus the tool (function) definitions they use."""

    messages: list[dict[str, Any]]
    tools: Optional[list[dict[str, Any]]]


def _has_prefix(attributes: Mapping[str, Any], prefix: str) -> bool:
    dotted = prefix + "."
    return prefix in attributes or any(key.startswith(dotted) for key in attributes)


def _is_message_span(span: Span) -> bool:
    return any(_has_prefix(span.attributes, prefix) for prefix in _MESSAGE_PREFIXES)


def _carries_messages(span: Span) -> bool:
    return _has_prefix(span.attributes, "gen_ai.prompt") or _has_prefix(span.attributes, "gen_ai.completion")


def _indexed_list(span: Span, prefix: str) -> list[dict[str, Any]]:
    """`prefix.<i>.<field>` attributes (or one JSON list at `prefix`) as a list of dicts; ValueError if malformed."""
    attributes = span.attributes
    if prefix in attributes:
        raw = attributes[prefix]
        value: Any = json.loads(raw) if isinstance(raw, str) else raw
        if any(key.startswith(prefix + ".") for key in attributes):
            raise ValueError(f"span {span.span_id}: {prefix!r} is both a value and a prefix of other attributes")
    elif _has_prefix(attributes, prefix):
        value = filter_and_unflatten_attributes(attributes, prefix)
    else:
        return []
    if isinstance(value, Mapping) and not value:
        return []
    if not isinstance(value, list):
        raise ValueError(
            f"span {span.span_id} ({span.name}): {prefix}.* must be indexed 0..n-1 (e.g. {prefix}.0.role), "
            f"got keys {sorted(value) if isinstance(value, Mapping) else type(value).__name__}"  # type: ignore[arg-type]
        )
    for index, entry in enumerate(value):  # type: ignore[var-annotated]
        if not isinstance(entry, Mapping):
            raise ValueError(
                f"span {span.span_id} ({span.name}): {prefix}.{index} must hold fields such as role/content, "
                f"got {entry!r}"
            )
    return [dict(entry) for entry in value]  # type: ignore[misc]


def _maybe_json(value: Any) -> Any:
    if isinstance(value, str) and value.strip().startswith(("[", "{")):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _content(value: Any) -> Any:
    """Content strings that encode a list of parts (multimodal) become that list."""
    decoded = _maybe_json(value)
    if isinstance(decoded, list) and all(isinstance(part, Mapping) and "type" in part for part in decoded):  # type: ignore[union-attr]
        return decoded
    return value


def _openai_tool_call(raw: Mapping[str, Any]) -> dict[str, Any]:
    function = raw.get("function")
    if isinstance(function, Mapping):
        name, arguments = function.get("name"), function.get("arguments")  # type: ignore[union-attr]
    else:
        name, arguments = raw.get("name"), raw.get("arguments", raw.get("parameters"))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {})
    nested = raw.get("call")
    call_id = raw.get("id") or raw.get("call_id") or (nested.get("id") if isinstance(nested, Mapping) else None)  # type: ignore[union-attr]
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_calls_of(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    raw_calls = _maybe_json(entry.get("tool_calls"))
    if raw_calls is None:
        return []
    if isinstance(raw_calls, Mapping):  # indices that are not 0..n-1
        raise ValueError(f"tool_calls must be indexed 0..n-1, got keys {sorted(raw_calls)}")  # type: ignore[arg-type]
    if not isinstance(raw_calls, list) or not all(isinstance(c, Mapping) for c in raw_calls):  # type: ignore[union-attr]
        raise ValueError(f"tool_calls must be a list of {{id, name, arguments}}, got {raw_calls!r}")
    return [_openai_tool_call(call) for call in raw_calls]  # type: ignore[union-attr]


def _tool_spans_calls(children: Sequence[Span]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Tool calls recorded as child spans (`tool.name`, `tool.parameters`, `tool.call.id`), plus descriptions."""
    calls: list[dict[str, Any]] = []
    descriptions: dict[str, str] = {}
    for child in children:
        if not _has_prefix(child.attributes, "tool"):
            continue
        tool = filter_and_unflatten_attributes(child.attributes, "tool")
        if not isinstance(tool, Mapping) or not tool.get("name"):
            continue
        calls.append(_openai_tool_call(tool))
        if isinstance(tool.get("description"), str):
            descriptions[str(tool["name"])] = str(tool["description"])
    return calls, descriptions


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return "string"


def _tool_from_call(call: Mapping[str, Any], description: Optional[str]) -> dict[str, Any]:
    arguments = _maybe_json(call["function"]["arguments"])
    properties = (
        {key: {"type": _json_type(value)} for key, value in arguments.items()}  # type: ignore[union-attr]
        if isinstance(arguments, Mapping)
        else {}
    )
    function: dict[str, Any] = {
        "name": call["function"]["name"],
        "parameters": {"type": "object", "properties": properties, "required": sorted(properties)},
    }
    if description:
        function["description"] = description
    return {"type": "function", "function": function}


def _declared_tools(span: Span) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for declared in _indexed_list(span, "gen_ai.request.functions"):
        function: dict[str, Any] = {"name": declared.get("name")}
        if declared.get("description") is not None:
            function["description"] = declared["description"]
        parameters = _maybe_json(declared.get("parameters"))
        function["parameters"] = parameters if isinstance(parameters, Mapping) else {"type": "object", "properties": {}}
        tools.append({"type": "function", "function": function})
    return tools


def _prompt_message(entry: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": entry.get("role", "user")}
    tool_calls = _tool_calls_of(entry)
    message["content"] = _content(entry.get("content")) if "content" in entry else (None if tool_calls else "")
    for key in ("name", "tool_call_id"):
        if entry.get(key) is not None:
            message[key] = entry[key]
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def span_to_conversation(
    span: Span, children: Sequence[Span], *, derive_tools: bool = False
) -> Optional[OpenAIMessages]:
    """The conversation one LLM-call span records (prompt then completion), or None if it holds no messages.

    `tools` are those the request declared (None when it declared none); with `derive_tools` the tools the
    assistant called without their being declared are added, described from the calls.
    """
    messages = [_prompt_message(entry) for entry in _indexed_list(span, "gen_ai.prompt")]
    child_calls, descriptions = _tool_spans_calls(children)
    used_calls: list[dict[str, Any]] = []
    for entry in _indexed_list(span, "gen_ai.completion"):
        message: dict[str, Any] = {"role": entry.get("role", "assistant")}
        tool_calls = _tool_calls_of(entry) or child_calls
        child_calls = [] if tool_calls is child_calls else child_calls
        message["content"] = (
            _content(entry.get("content")) if entry.get("content") is not None else (None if tool_calls else "")
        )
        if tool_calls:
            message["tool_calls"] = tool_calls
        messages.append(message)
    if not messages:
        return None
    for message in messages:
        used_calls.extend(message.get("tool_calls", []) if message["role"] == "assistant" else [])
    tools = _declared_tools(span)
    if not derive_tools:
        return {"messages": messages, "tools": tools or None}
    declared_names = {tool["function"]["name"] for tool in tools}
    for call in used_calls:
        name = call["function"]["name"]
        if name and name not in declared_names:
            declared_names.add(name)
            tools.append(_tool_from_call(call, descriptions.get(name)))
    return {"messages": messages, "tools": tools or None}


class TraceToMessages(TraceAdapter[list[OpenAIMessages]]):
    """One `{messages, tools}` conversation per LLM call in the trace, in start-time order.

    Reads `gen_ai.prompt.*` / `gen_ai.completion.*` (tool calls from the completion, or from child spans
    with `tool.*` attributes). When one call is recorded by nested spans (e.g. a LangChain span around the
    OpenAI span) only the innermost is used; spans repeating a response id are used once.
    Raises ValueError when those attributes do not have the expected list-of-messages shape.

    `tools` lists the tools the request declared, and is None when it declared none (as in v0.3). With
    `derive_tools=True`, tools the assistant called without declaring them are added too, their parameter
    schema inferred from the call arguments (useful for fine-tuning files, which want every called tool).
    """

    def __init__(self, *, derive_tools: bool = False) -> None:
        super().__init__()
        self.derive_tools = derive_tools

    def __call__(self, source: Iterable[Union[Span, ReadableSpan]], /) -> list[OpenAIMessages]:  # type: ignore[override]
        return self.adapt(source)

    def adapt(self, source: Iterable[Union[Span, ReadableSpan]], /) -> list[OpenAIMessages]:  # type: ignore[override]
        spans = normalize_spans(source)
        by_id = {span.span_id: span for span in spans}
        children: dict[str, list[Span]] = {}
        for span in spans:
            if span.parent_id:
                children.setdefault(span.parent_id, []).append(span)
        shadowed = _outer_duplicates(spans, by_id)
        conversations: list[OpenAIMessages] = []
        seen_response_ids: set[str] = set()
        for span in sorted(spans, key=lambda s: (span_start(s), s.sequence_id)):
            if not _is_message_span(span) or span.span_id in shadowed:
                continue
            response_id = response_id_of(span)
            if response_id is not None:
                if response_id in seen_response_ids:
                    continue
                seen_response_ids.add(response_id)
            conversation = span_to_conversation(span, children.get(span.span_id, []), derive_tools=self.derive_tools)
            if conversation is not None:
                conversations.append(conversation)
        return conversations


def _outer_duplicates(spans: Sequence[Span], by_id: Mapping[str, Span]) -> set[str]:
    """Message spans that enclose another message span of the same call (compatible response ids)."""
    shadowed: set[str] = set()
    for span in spans:
        if not _carries_messages(span):
            continue
        inner_id = response_id_of(span)
        parent_id = span.parent_id
        visited: set[str] = set()
        while parent_id and parent_id in by_id and parent_id not in visited:
            visited.add(parent_id)
            parent = by_id[parent_id]
            if _carries_messages(parent):
                outer_id = response_id_of(parent)
                if outer_id is None or inner_id is None or outer_id == inner_id:
                    shadowed.add(parent.span_id)
            parent_id = parent.parent_id
    return shadowed
