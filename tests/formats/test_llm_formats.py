"""Responses API and Anthropic Messages API <-> chat completions, as the proxy and the instrumentation use them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentlightning.formats.messages import (
    ChatToMessagesStream,
    MessagesStreamAccumulator,
    MessagesTranslationError,
    chat_response_to_messages,
    messages_request_to_chat,
    messages_response_to_chat,
)
from agentlightning.formats.responses import (
    ChatToResponsesStream,
    ResponsesStreamAccumulator,
    ResponsesTranslationError,
    chat_response_to_responses,
    responses_request_to_chat,
    responses_response_to_chat,
)
from agentlightning.instrumentation.openai import ChatCompletionAccumulator

CHAT_TOOL_ANSWER: dict[str, Any] = {
    "id": "chatcmpl-1",
    "model": "m",
    "created": 1,
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
                ],
            },
            "finish_reason": "tool_calls",
            "token_ids": [7, 8, 9],
        }
    ],
    "usage": {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7},
    "prompt_token_ids": [1, 2, 3, 4],
}


def test_responses_input_items_become_chat_messages() -> None:
    chat = responses_request_to_chat(
        {
            "model": "m",
            "instructions": "sys",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
                {"type": "reasoning", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "r1"},
                {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
            ],
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
            "tool_choice": {"type": "function", "name": "f"},
            "max_output_tokens": 9,
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
            "store": True,
        }
    )
    messages = chat["messages"]
    assert messages[0] == {"role": "system", "content": "sys"}
    assert messages[1] == {"role": "user", "content": "ab"}
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["c1", "c2"]  # consecutive calls share one turn
    assert messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "r1"}
    assert messages[4]["content"] == [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}}
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["max_tokens"] == 9 and "store" not in chat
    assert chat["response_format"]["json_schema"]["name"] == "s"


def test_a_responses_text_and_its_function_calls_are_one_assistant_turn() -> None:
    """What one response output (text, then calls) comes back as: the turn the model wrote, not two turns."""
    chat = responses_request_to_chat(
        {
            "input": [
                {"role": "user", "content": "weather?"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            ]
        }
    )
    assistant = chat["messages"][1]
    assert assistant["content"] == "Let me look." and [c["id"] for c in assistant["tool_calls"]] == ["c1"]
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "tool"]


def test_responses_strictness_names_the_field_and_lenient_mode_skips() -> None:
    with pytest.raises(ResponsesTranslationError, match="tools\\[0\\]"):
        responses_request_to_chat({"input": "x", "tools": [{"type": "file_search"}]})
    lenient = responses_request_to_chat({"input": "x", "tools": [{"type": "file_search"}]}, strict=False)
    assert "tools" not in lenient and lenient["messages"] == [{"role": "user", "content": "x"}]


def test_chat_answer_round_trips_through_a_response_object() -> None:
    response = chat_response_to_responses(CHAT_TOOL_ANSWER, {"model": "m", "tools": []})
    assert [item["type"] for item in response["output"]] == ["message", "function_call"]
    assert response["output"][1]["call_id"] == "call_1"
    assert response["usage"]["input_tokens"] == 4 and response["usage"]["output_tokens"] == 3
    assert response["prompt_token_ids"] == [1, 2, 3, 4] and response["token_ids"] == [7, 8, 9]
    back = responses_response_to_chat(response)
    assert back["choices"][0]["message"]["content"] == "Let me check."
    assert back["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "lookup"
    assert back["prompt_token_ids"] == [1, 2, 3, 4] and back["choices"][0]["token_ids"] == [7, 8, 9]
    length = {**CHAT_TOOL_ANSWER, "choices": [{"message": {"content": "cut"}, "finish_reason": "length"}]}
    truncated = chat_response_to_responses(length, {})
    assert truncated["status"] == "incomplete" and truncated["incomplete_details"] == {"reason": "max_output_tokens"}


def _chat_chunks() -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = [
        {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    ]
    chunks += [{"choices": [{"index": 0, "delta": {"content": piece}}]} for piece in ("Let ", "me ", "check.")]
    call = {"index": 0, "id": "call_1", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]})
    return chunks


def test_a_chat_stream_becomes_responses_events_that_rebuild_the_response() -> None:
    stream, accumulator, replay = (
        ChatToResponsesStream({"model": "m"}),
        ChatCompletionAccumulator(),
        ResponsesStreamAccumulator(),
    )
    events: list[dict[str, Any]] = []
    for chunk in _chat_chunks():
        accumulator.add(chunk)
        events += stream.add_chunk(chunk)
    events += stream.finish(accumulator.to_response())
    for event in events:
        replay.add(event)
    kinds = [event["type"] for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["Let ", "me ", "check."]
    assert kinds.count("response.output_item.added") == 2 and kinds.count("response.output_item.done") == 2
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = replay.to_response()
    assert final["output"][0]["content"][0]["text"] == "Let me check."
    assert json.loads(final["output"][1]["arguments"]) == {"q": "x"}
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["id"] == final["output"][0]["id"]  # ids announced early match the final response


def test_anthropic_blocks_become_chat_messages_and_back() -> None:
    chat = messages_request_to_chat(
        {
            "model": "claude",
            "max_tokens": 10,
            "system": [{"type": "text", "text": "sys"}],
            "stop_sequences": ["END"],
            "metadata": {"user_id": "u1"},
            "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "messages": [
                {"role": "user", "content": "q"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "hmm", "signature": "s"},
                        {"type": "text", "text": "calling"},
                        {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [{"type": "text", "text": "bad"}],
                            "is_error": True,
                        },
                        {"type": "text", "text": "go on"},
                    ],
                },
            ],
        }
    )
    messages = chat["messages"]
    assert messages[0] == {"role": "system", "content": "sys"}
    assert messages[2]["content"] == "calling" and json.loads(
        messages[2]["tool_calls"][0]["function"]["arguments"]
    ) == {"a": 1}
    assert messages[3] == {"role": "tool", "tool_call_id": "t1", "content": "Error: bad"}
    assert messages[4] == {"role": "user", "content": "go on"}
    assert chat["stop"] == ["END"] and chat["user"] == "u1"
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    message = chat_response_to_messages(CHAT_TOOL_ANSWER, {"model": "claude"})
    assert [b["type"] for b in message["content"]] == ["text", "tool_use"]
    assert message["content"][1]["input"] == {"q": "x"} and message["stop_reason"] == "tool_use"
    assert message["prompt_token_ids"] == [1, 2, 3, 4] and message["token_ids"] == [7, 8, 9]
    back = messages_response_to_chat(message)
    assert back["choices"][0]["finish_reason"] == "tool_calls" and back["usage"]["total_tokens"] == 7


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "'max_tokens'"),
        ({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}, "'max_tokens'"),
        ({"max_tokens": 1, "messages": []}, "'messages'"),
        ({"max_tokens": 1, "messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "document"}]}]}, "'document'"),
        (
            {
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"name": "web", "type": "web_search_20250305"}],
            },
            "tools[0]",
        ),
    ],
)
def test_bad_messages_requests_name_the_field(body: dict[str, Any], needle: str) -> None:
    with pytest.raises(MessagesTranslationError) as info:
        messages_request_to_chat(body)
    assert needle in str(info.value)


def test_a_chat_stream_becomes_anthropic_events_that_rebuild_the_message() -> None:
    stream, accumulator, replay = (
        ChatToMessagesStream({"model": "claude"}),
        ChatCompletionAccumulator(),
        MessagesStreamAccumulator(),
    )
    events: list[dict[str, Any]] = []
    for chunk in _chat_chunks():
        accumulator.add(chunk)
        events += stream.add_chunk(chunk)
    final_chat = {
        **accumulator.to_response(),
        "prompt_token_ids": [1, 2],
        "usage": {"prompt_tokens": 2, "completion_tokens": 3},
    }
    final_chat["choices"][0]["token_ids"] = [5, 6, 7]
    events += stream.finish(final_chat)
    for event in events:
        replay.add(event)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert [
        e["delta"]["text"] for e in events if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    ] == ["Let ", "me ", "check."]
    message = replay.to_message()
    assert message["content"][0]["text"] == "Let me check."
    assert message["content"][1]["input"] == {"q": "x"}
    assert message["stop_reason"] == "tool_use" and message["usage"]["output_tokens"] == 3
    assert message["prompt_token_ids"] == [1, 2] and message["token_ids"] == [5, 6, 7]
