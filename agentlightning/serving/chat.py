"""Chat prompts for the policy server: OpenAI messages + tools -> token ids, and model text -> tool calls.

Tool convention (the Hermes/Qwen one): tools are listed in the system prompt and the model answers a call
as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. Templates that render tools themselves
(they mention `tools`) get the tools passed through instead, and the earlier turns' calls with their
arguments as objects. A reply that is one `{"name": ..., "parameters": {...}}` object (Llama 3.1) is a
call too.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "TOOL_CALL_OPEN",
    "TOOL_CALL_CLOSE",
    "tools_system_prompt",
    "normalize_messages",
    "render_chat_text",
    "render_chat_prompt",
    "parse_tool_calls",
]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def tools_system_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    """The system-prompt text that lists the tools and teaches the `<tool_call>` reply format."""
    signatures = "\n".join(json.dumps(tool.get("function", tool), ensure_ascii=False) for tool in tools)
    return (
        "You can call functions to help with the user's request. Available functions:\n"
        f"<tools>\n{signatures}\n</tools>\n"
        "To call a function, answer with a JSON object inside tags, one per call:\n"
        f'{TOOL_CALL_OPEN}\n{{"name": "<function name>", "arguments": {{<arguments object>}}}}\n{TOOL_CALL_CLOSE}'
    )


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: List[str] = []
        for part in content:  # type: ignore[reportUnknownVariableType]
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):  # type: ignore[reportUnknownMemberType]
                parts.append(str(part.get("text", "")))  # type: ignore[reportUnknownMemberType]
            else:
                raise ValueError(f"message content part {part!r} is not supported; the policy server takes text only")
        return "".join(parts)
    raise ValueError(f"message content must be a string or a list of text parts, got {type(content).__name__}")


def _tool_call_text(call: Mapping[str, Any]) -> str:
    function = call.get("function", call)
    arguments: Any = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    body = json.dumps({"name": function.get("name"), "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def _call_with_object_arguments(call: Any) -> Any:
    """An OpenAI tool call whose JSON-string `arguments` are decoded into the object they encode.

    Templates that render tool calls themselves (Qwen2.5, Llama 3.1) write `arguments | tojson`: given the
    OpenAI wire form, a JSON string, they would write it quoted and escaped, not as the object the model
    sampled, and the next turn's prompt would no longer extend the previous prompt + reply.
    """
    if not isinstance(call, Mapping):
        return call
    function = call.get("function")  # type: ignore[reportUnknownMemberType]
    if not isinstance(function, Mapping) or not isinstance(function.get("arguments"), str):  # type: ignore[reportUnknownMemberType]
        return call
    try:
        arguments = json.loads(function["arguments"])  # type: ignore[index]
    except json.JSONDecodeError:
        return call
    if not isinstance(arguments, dict):
        return call
    return {**call, "function": {**function, "arguments": arguments}}  # type: ignore[reportUnknownArgumentType]


def normalize_messages(
    messages: Sequence[Mapping[str, Any]], tools: Optional[Sequence[Mapping[str, Any]]], *, template_has_tools: bool
) -> List[Dict[str, Any]]:
    """Flatten content to text; unless the template renders tools itself, put tools and calls into text."""
    result: List[Dict[str, Any]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if not isinstance(role, str):
            raise ValueError(f"messages[{index}] has no 'role'; every message needs one (system/user/assistant/tool)")
        item: Dict[str, Any] = dict(message)
        item["content"] = _content_text(message.get("content"))
        if template_has_tools and item.get("tool_calls"):
            item["tool_calls"] = [_call_with_object_arguments(call) for call in item["tool_calls"]]
        if not template_has_tools:
            calls = item.pop("tool_calls", None) or []
            if calls:
                texts = [_tool_call_text(call) for call in calls]
                item["content"] = "\n".join(([item["content"]] if item["content"] else []) + texts)
            item.pop("tool_call_id", None)
            item.pop("name", None)
        result.append(item)
    if tools and not template_has_tools:
        instructions = tools_system_prompt(tools)
        if result and result[0]["role"] == "system":
            result[0]["content"] = f"{result[0]['content']}\n\n{instructions}" if result[0]["content"] else instructions
        else:
            result.insert(0, {"role": "system", "content": instructions})
    return result


def render_chat_text(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    tools: Optional[Sequence[Mapping[str, Any]]] = None,
    **template_kwargs: Any,
) -> str:
    """The chat prompt as text, ending with the assistant generation header."""
    template = tokenizer.chat_template
    if not template:
        raise ValueError("the tokenizer has no chat template; set tokenizer.chat_template before serving chat")
    has_tools = "tools" in str(template)
    normalized = normalize_messages(messages, tools, template_has_tools=has_tools)
    extra: Dict[str, Any] = {"tools": list(tools)} if tools and has_tools else {}
    text = tokenizer.apply_chat_template(
        normalized,  # type: ignore[arg-type]
        add_generation_prompt=True,
        tokenize=False,
        **extra,
        **template_kwargs,
    )
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, expected str")
    return text


def render_chat_prompt(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Mapping[str, Any]],
    tools: Optional[Sequence[Mapping[str, Any]]] = None,
    **template_kwargs: Any,
) -> List[int]:
    """Token ids of the chat prompt, ending with the assistant generation header."""
    text = render_chat_text(tokenizer, messages, tools, **template_kwargs)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])  # type: ignore[arg-type]


def _openai_call(payload: Mapping[str, Any]) -> Dict[str, Any]:
    arguments: Any = payload.get("arguments", payload.get("parameters", {}))
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {
            "name": payload["name"],
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False),
        },
    }


def _bare_json_call(text: str) -> Optional[Dict[str, Any]]:
    """A whole reply that is one `{"name": ..., "parameters": {...}}` object: Llama 3.1's JSON tool call."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        payload = json.loads(stripped)
    except json.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):  # type: ignore[reportUnknownMemberType]
        return None
    if "parameters" not in payload and "arguments" not in payload:
        return None
    return payload  # type: ignore[reportUnknownVariableType]


def parse_tool_calls(text: str) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """Split model output into `(content, tool_calls)`; blocks that are not valid JSON stay in the content.

    Calls are `<tool_call>` blocks (Hermes, Qwen), or else a reply that is a single JSON object with a
    `name` and `parameters` (Llama 3.1's format; `arguments` too).
    """
    calls: List[Dict[str, Any]] = []
    kept: List[str] = []
    position = 0
    for match in _TOOL_CALL_RE.finditer(text):
        try:
            payload = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):  # type: ignore[reportUnknownMemberType]
            continue
        calls.append(_openai_call(payload))  # type: ignore[reportUnknownArgumentType]
        kept.append(text[position : match.start()])
        position = match.end()
    if not calls:
        bare = _bare_json_call(text)
        return (None, [_openai_call(bare)]) if bare is not None else (text, [])
    kept.append(text[position:])
    content = "".join(kept).strip()
    return (content or None), calls
