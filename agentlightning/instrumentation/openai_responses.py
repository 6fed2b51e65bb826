"""How an OpenAI Responses API call becomes an LLM span: `openai.responses` with chat-style attributes.

Input items become `gen_ai.prompt.*` messages and output items `gen_ai.completion.0.*` (text and function
calls), so triplet adapters read a Responses call like a chat completion; the raw input items, tools and
output items are kept as JSON (`gen_ai.request.input_items`, `gen_ai.request.tools`,
`gen_ai.response.output_items`), with usage and the token ids a vLLM-style backend returns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentlightning.formats.responses import (
    ResponsesStreamAccumulator,
    responses_request_to_chat,
    responses_response_to_chat,
)
from agentlightning.types import Attributes

from .llm_calls import CallFormat
from .openai_chat import request_to_attributes, response_to_attributes

__all__ = ["RESPONSES_SPAN_NAME", "RESPONSES_FORMAT", "responses_request_attributes", "responses_response_attributes"]

RESPONSES_SPAN_NAME = "openai.responses"


def _json(value: Any) -> str:
    return json.dumps(value, default=str)


def responses_request_attributes(request: Mapping[str, Any]) -> Attributes:
    attributes = request_to_attributes(responses_request_to_chat(request, strict=False))
    attributes["gen_ai.request.type"] = "responses"
    if request.get("input") is not None and not isinstance(request["input"], str):
        attributes["gen_ai.request.input_items"] = _json(request["input"])
    if request.get("tools"):
        attributes["gen_ai.request.tools"] = _json(request["tools"])
    if request.get("max_output_tokens") is not None:
        attributes["gen_ai.request.max_output_tokens"] = int(request["max_output_tokens"])
    return attributes


def responses_response_attributes(response: Mapping[str, Any]) -> Attributes:
    attributes = response_to_attributes(responses_response_to_chat(response))
    if response.get("output") is not None:
        attributes["gen_ai.response.output_items"] = _json(response["output"])
    if response.get("status") is not None:
        attributes["gen_ai.response.status"] = str(response["status"])
    return attributes


RESPONSES_FORMAT = CallFormat(
    RESPONSES_SPAN_NAME,
    responses_request_attributes,
    responses_response_attributes,
    ResponsesStreamAccumulator,
    lambda result: hasattr(result, "output") and hasattr(result, "status"),
)
