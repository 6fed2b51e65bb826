"""The pure request/response -> attribute conversions shared by the OpenAI instrumentation and the LLM proxy."""

from __future__ import annotations

import json
from typing import Any

from agentlightning.instrumentation import AGENTOPS_INSTALLED, OPENAI_INSTALLED, instrument_all, uninstrument_all
from agentlightning.instrumentation.openai import (
    ChatCompletionAccumulator,
    is_openai_instrumented,
    request_to_attributes,
    response_to_attributes,
)


def test_request_attributes_cover_model_sampling_messages_and_tools() -> None:
    attributes = request_to_attributes(
        {
            "model": "qwen",
            "temperature": 0.0,
            "max_completion_tokens": 10,
            "stop": "END",
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {}}]},
                {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {"x": 1}}}]},
                {"role": "tool", "tool_call_id": "c", "content": "done", "name": "f"},
            ],
            "functions": [{"name": "legacy", "parameters": {"type": "object"}}],
        }
    )
    assert attributes["gen_ai.request.model"] == "qwen"
    assert attributes["gen_ai.request.temperature"] == 0.0
    assert attributes["gen_ai.request.max_completion_tokens"] == 10
    assert attributes["gen_ai.request.stop"] == "END"
    assert json.loads(str(attributes["gen_ai.prompt.0.content"]))[0] == {"type": "text", "text": "hi"}
    assert attributes["gen_ai.prompt.1.tool_calls.0.arguments"] == '{"x": 1}'
    assert "gen_ai.prompt.1.content" not in attributes
    assert attributes["gen_ai.prompt.2.name"] == "f"
    assert attributes["gen_ai.request.functions.0.name"] == "legacy"
    assert "gen_ai.request.response_format" not in attributes


def test_response_attributes_take_token_ids_from_vllm_fields() -> None:
    response: dict[str, Any] = {
        "id": "r1",
        "model": "qwen",
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok", "refusal": None},
                "finish_reason": "stop",
                "token_ids": [7, 8],
                "logprobs": {"content": [{"token": "ok", "logprob": -0.1}], "refusal": None},
            },
            {"index": 1, "message": {"role": "assistant", "content": "alt"}, "finish_reason": "length"},
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    attributes = response_to_attributes(response)
    assert attributes["prompt_token_ids"] == [1, 2, 3]
    assert attributes["response_token_ids"] == [7, 8]
    assert json.loads(str(attributes["logprobs.content"])) == [{"token": "ok", "logprob": -0.1}]
    assert attributes["gen_ai.completion.1.content"] == "alt"
    assert attributes["gen_ai.completion.1.finish_reason"] == "length"
    assert attributes["gen_ai.usage.total_tokens"] == 5


def test_response_token_ids_from_provider_specific_fields() -> None:
    response = {"choices": [{"message": {"content": "x"}, "provider_specific_fields": {"token_ids": [4, 5]}}]}
    assert response_to_attributes(response)["response_token_ids"] == [4, 5]


def test_accumulator_rebuilds_a_streamed_response() -> None:
    chunks: list[dict[str, Any]] = [
        {
            "id": "s1",
            "model": "m",
            "prompt_token_ids": [1, 2],
            "choices": [{"index": 0, "delta": {"role": "assistant"}}],
        },
        {"id": "s1", "choices": [{"index": 0, "delta": {"content": "Hel"}, "token_ids": [10]}]},
        {"id": "s1", "choices": [{"index": 0, "delta": {"content": "lo"}, "token_ids": [11]}]},
        {
            "id": "s1",
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a"'}}]},
                }
            ],
        },
        {
            "id": "s1",
            "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}}],
        },
        {"id": "s1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls", "token_ids": [12, 99]}]},
        {"id": "s1", "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}},
    ]
    accumulator = ChatCompletionAccumulator()
    for chunk in chunks:
        accumulator.add(chunk)
    attributes = response_to_attributes(accumulator.to_response())
    assert attributes["gen_ai.response.id"] == "s1"
    assert attributes["gen_ai.completion.0.content"] == "Hello"
    assert attributes["gen_ai.completion.0.tool_calls.0.id"] == "c1"
    assert attributes["gen_ai.completion.0.tool_calls.0.arguments"] == '{"a": 1}'
    assert attributes["gen_ai.completion.0.finish_reason"] == "tool_calls"
    assert attributes["prompt_token_ids"] == [1, 2]
    assert attributes["response_token_ids"] == [10, 11, 12, 99]
    assert attributes["gen_ai.usage.completion_tokens"] == 4


def test_instrument_all_installs_the_openai_instrumentation() -> None:
    assert OPENAI_INSTALLED
    instrument_all()
    assert is_openai_instrumented()
    uninstrument_all()
    assert not is_openai_instrumented()
    instrument_all()
    assert is_openai_instrumented()
    assert isinstance(AGENTOPS_INSTALLED, bool)
