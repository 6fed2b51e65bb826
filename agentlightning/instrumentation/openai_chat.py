"""How an OpenAI chat completion becomes an LLM span: `openai.chat.completion` with `gen_ai.*` attributes.

The request and response conversions (`request_to_attributes`, `response_to_attributes`) work on plain
JSON dicts and are shared with the LLM proxy and the Anthropic, LiteLLM and Responses formats;
`ChatCompletionAccumulator` rebuilds a response dict from streamed chunks so streamed calls get the same
attributes. `CHAT_FORMAT` is the call format `instrument_openai()` (in `openai`) installs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

from agentlightning.semconv import LOGPROBS_CONTENT, LOGPROBS_REFUSAL, PROMPT_TOKEN_IDS, RESPONSE_TOKEN_IDS
from agentlightning.types import Attributes

from .llm_calls import CallFormat, as_dict

__all__ = [
    "LLM_SPAN_NAME",
    "SAMPLING_FIELDS",
    "MAX_STREAM_INDEX",
    "request_to_attributes",
    "response_to_attributes",
    "stream_index",
    "ChatCompletionAccumulator",
    "CHAT_FORMAT",
]

LLM_SPAN_NAME = "openai.chat.completion"

# Request fields recorded as `gen_ai.request.<field>`.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_completion_tokens",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "n",
    "seed",
    "stop",
    "logprobs",
    "top_logprobs",
    "stream",
    "reasoning_effort",
    "parallel_tool_calls",
    "user",
)


# ---- JSON helpers ----


def _json(value: Any) -> str:
    return json.dumps(value, default=lambda o: as_dict(o) or str(o))


def _int_list(value: Any) -> Optional[list[int]]:
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):  # type: ignore[union-attr]
        return [int(v) for v in value]  # type: ignore[union-attr]
    return None


def _content_attribute(content: Any) -> Optional[str]:
    if content is None:
        return None
    if isinstance(content, str):
        return content
    return _json(content)


def _tool_call_attributes(prefix: str, tool_calls: Any) -> Attributes:
    attributes: Attributes = {}
    for j, raw_call in enumerate(tool_calls or []):
        call = as_dict(raw_call)
        function = as_dict(call.get("function"))
        if call.get("id") is not None:
            attributes[f"{prefix}.tool_calls.{j}.id"] = str(call["id"])
        if function.get("name") is not None:
            attributes[f"{prefix}.tool_calls.{j}.name"] = str(function["name"])
        arguments = function.get("arguments")
        if arguments is not None:
            attributes[f"{prefix}.tool_calls.{j}.arguments"] = (
                arguments if isinstance(arguments, str) else _json(arguments)
            )
    return attributes


# ---- request / response -> attributes (shared with the LLM proxy) ----


def request_to_attributes(request: Mapping[str, Any], *, system: str = "openai") -> Attributes:
    """`gen_ai.*` attributes of a chat-completions request body (model, sampling params, messages, tools)."""
    attributes: Attributes = {"gen_ai.system": system, "gen_ai.request.type": "chat"}
    if request.get("model") is not None:
        attributes["gen_ai.request.model"] = str(request["model"])
    # As the AgentOps instrumentation v0.3 traced with: whether the response was requested as a stream.
    attributes["gen_ai.request.streaming"] = bool(request.get("stream"))
    for field in SAMPLING_FIELDS:
        value = request.get(field)
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            attributes[f"gen_ai.request.{field}"] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):  # type: ignore[union-attr]
            attributes[f"gen_ai.request.{field}"] = [str(v) for v in value]  # type: ignore[union-attr]
        else:
            attributes[f"gen_ai.request.{field}"] = _json(value)
    for i, raw_message in enumerate(request.get("messages") or []):
        message = as_dict(raw_message)
        prefix = f"gen_ai.prompt.{i}"
        if message.get("role") is not None:
            attributes[f"{prefix}.role"] = str(message["role"])
        content = _content_attribute(message.get("content"))
        if content is not None:
            attributes[f"{prefix}.content"] = content
        for key in ("name", "tool_call_id"):
            if message.get(key) is not None:
                attributes[f"{prefix}.{key}"] = str(message[key])
        attributes.update(_tool_call_attributes(prefix, message.get("tool_calls")))
    functions: list[dict[str, Any]] = []
    for raw_tool in request.get("tools") or []:
        tool = as_dict(raw_tool)
        functions.append(as_dict(tool.get("function")) if "function" in tool else tool)
    functions.extend(as_dict(f) for f in request.get("functions") or [])
    for i, function in enumerate(functions):
        prefix = f"gen_ai.request.functions.{i}"
        if function.get("name") is not None:
            attributes[f"{prefix}.name"] = str(function["name"])
        if function.get("description") is not None:
            attributes[f"{prefix}.description"] = str(function["description"])
        if function.get("parameters") is not None:
            attributes[f"{prefix}.parameters"] = _json(function["parameters"])
    return attributes


def _response_token_ids(choice: Mapping[str, Any]) -> Optional[list[int]]:
    token_ids = _int_list(choice.get("token_ids"))
    if token_ids is None:
        token_ids = _int_list(as_dict(choice.get("provider_specific_fields")).get("token_ids"))
    return token_ids


def response_to_attributes(response: Mapping[str, Any]) -> Attributes:
    """`gen_ai.*` attributes of a chat-completions response body, plus token ids and logprobs.

    Token ids follow vLLM's `return_token_ids`: top-level `prompt_token_ids` and per-choice `token_ids`
    (the first choice's become `response_token_ids`).
    """
    attributes: Attributes = {}
    if response.get("id") is not None:
        attributes["gen_ai.response.id"] = str(response["id"])
    if response.get("model") is not None:
        attributes["gen_ai.response.model"] = str(response["model"])
    if response.get("system_fingerprint") is not None:
        attributes["gen_ai.response.system_fingerprint"] = str(response["system_fingerprint"])
    choices = [as_dict(c) for c in response.get("choices") or []]
    for position, choice in enumerate(choices):
        index = choice.get("index", position)
        index = index if isinstance(index, int) else position
        message = as_dict(choice.get("message"))
        prefix = f"gen_ai.completion.{index}"
        if message.get("role") is not None:
            attributes[f"{prefix}.role"] = str(message["role"])
        content = _content_attribute(message.get("content"))
        if content is not None:
            attributes[f"{prefix}.content"] = content
        if message.get("refusal") is not None:
            attributes[f"{prefix}.refusal"] = str(message["refusal"])
        if choice.get("finish_reason") is not None:
            attributes[f"{prefix}.finish_reason"] = str(choice["finish_reason"])
        attributes.update(_tool_call_attributes(prefix, message.get("tool_calls")))
        function_call = as_dict(message.get("function_call"))
        if function_call and not message.get("tool_calls"):
            attributes.update(_tool_call_attributes(prefix, [{"function": function_call}]))
    usage = as_dict(response.get("usage"))
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if isinstance(usage.get(key), int):
            attributes[f"gen_ai.usage.{key}"] = usage[key]
    prompt_token_ids = _int_list(response.get("prompt_token_ids"))
    if prompt_token_ids is None and choices:
        prompt_token_ids = _int_list(choices[0].get("prompt_token_ids"))
    if prompt_token_ids is not None:
        attributes[PROMPT_TOKEN_IDS] = prompt_token_ids
    if choices:
        response_token_ids = _response_token_ids(choices[0])
        if response_token_ids is not None:
            attributes[RESPONSE_TOKEN_IDS] = response_token_ids
        logprobs = as_dict(choices[0].get("logprobs"))
        if logprobs.get("content") is not None:
            attributes[LOGPROBS_CONTENT] = _json(logprobs["content"])
        if logprobs.get("refusal") is not None:
            attributes[LOGPROBS_REFUSAL] = _json(logprobs["refusal"])
    return attributes


#: Largest choice / tool-call index a stream may use (OpenAI allows n <= 128); a larger one is malformed.
MAX_STREAM_INDEX = 1024


def stream_index(value: Any, what: str, default: int) -> int:
    """The index a stream chunk gives a choice or tool call; ValueError when it is not a small non-negative int."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_STREAM_INDEX:
        raise ValueError(f"{what} index {value!r} is not an integer in [0, {MAX_STREAM_INDEX})")
    return value


class ChatCompletionAccumulator:
    """Rebuilds a chat-completion response dict from streamed chunks (content, tool calls, usage, token ids).

    Never raises (it runs inside the caller's stream): a chunk with a malformed choice or tool-call index
    changes nothing and its reason is kept in `malformed`.
    """

    def __init__(self) -> None:
        self._response: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}
        self.malformed: list[str] = []

    def add(self, chunk: Any) -> None:
        try:
            self._add(chunk)
        except (ValueError, TypeError, AttributeError) as exc:
            self.malformed.append(str(exc))

    def _add(self, chunk: Any) -> None:
        data = as_dict(chunk)
        choices = [as_dict(raw) for raw in data.get("choices") or []]
        for delta_choice in choices:  # checked first: a malformed chunk changes nothing
            stream_index(delta_choice.get("index"), "choice", 0)
            for raw_call in as_dict(delta_choice.get("delta")).get("tool_calls") or []:
                stream_index(as_dict(raw_call).get("index"), "tool call", 0)
        for key in ("id", "model", "system_fingerprint", "created"):
            if data.get(key) is not None and key not in self._response:
                self._response[key] = data[key]
        if data.get("usage"):
            self._response["usage"] = as_dict(data["usage"])
        prompt_token_ids = _int_list(data.get("prompt_token_ids"))
        if prompt_token_ids is not None:
            self._response["prompt_token_ids"] = prompt_token_ids
        for delta_choice in choices:
            self._add_choice(delta_choice)

    def _add_choice(self, delta_choice: dict[str, Any]) -> None:
        index = stream_index(delta_choice.get("index"), "choice", 0)
        choice = self._choices.setdefault(index, {"index": index, "message": {"role": "assistant"}})
        message = choice["message"]
        delta = as_dict(delta_choice.get("delta"))
        if delta.get("role"):
            message["role"] = delta["role"]
        for key in ("content", "refusal"):
            if delta.get(key):
                message[key] = (message.get(key) or "") + str(delta[key])
        for raw_call in delta.get("tool_calls") or []:
            call_delta = as_dict(raw_call)
            calls: list[dict[str, Any]] = message.setdefault("tool_calls", [])
            call_index = stream_index(call_delta.get("index"), "tool call", len(calls))
            while len(calls) <= call_index:
                calls.append({"id": None, "type": "function", "function": {"name": None, "arguments": ""}})
            call = calls[call_index]
            if call_delta.get("id"):
                call["id"] = call_delta["id"]
            function_delta = as_dict(call_delta.get("function"))
            if function_delta.get("name"):
                call["function"]["name"] = (call["function"]["name"] or "") + str(function_delta["name"])
            if function_delta.get("arguments"):
                call["function"]["arguments"] += str(function_delta["arguments"])
        if delta_choice.get("finish_reason") is not None:
            choice["finish_reason"] = delta_choice["finish_reason"]
        token_ids = _response_token_ids(delta_choice)
        if token_ids is not None:
            choice.setdefault("token_ids", []).extend(token_ids)
        prompt_token_ids = _int_list(delta_choice.get("prompt_token_ids"))
        if prompt_token_ids is not None:
            self._response.setdefault("prompt_token_ids", prompt_token_ids)
        logprobs = as_dict(delta_choice.get("logprobs"))
        for key in ("content", "refusal"):
            if logprobs.get(key):
                choice.setdefault("logprobs", {}).setdefault(key, []).extend(logprobs[key])

    def to_response(self) -> dict[str, Any]:
        """The response as if it had not been streamed."""
        response = dict(self._response)
        response["choices"] = [self._choices[i] for i in sorted(self._choices)]
        return response


# ---- call format of chat completions ----


CHAT_FORMAT = CallFormat(
    LLM_SPAN_NAME,
    request_to_attributes,
    response_to_attributes,
    ChatCompletionAccumulator,
    lambda result: hasattr(result, "choices"),
)
