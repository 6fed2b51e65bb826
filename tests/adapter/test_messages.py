"""TraceToMessages: LLM-call spans -> OpenAI fine-tuning conversations with tools."""

from __future__ import annotations

import json

import pytest

from agentlightning.adapter import TraceToMessages
from agentlightning.types import Attributes

from .span_factory import SpanFactory

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}


def test_tool_call_conversation_from_our_instrumentation():
    f = SpanFactory()
    first = f.openai_call(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Oslo?"}],
        None,
        response_id="r1",
        tool_calls=[TOOL_CALL],
        tools=[WEATHER_TOOL],
        start=0,
        end=1,
    )
    second = f.openai_call(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ],
        "Sunny.",
        response_id="r2",
        tools=[WEATHER_TOOL],
        start=2,
        end=3,
    )
    conversations = TraceToMessages().adapt([second, first])
    assert conversations[0] == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        ],
        "tools": [WEATHER_TOOL],
    }
    assert conversations[1]["messages"][2:] == [
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
        {"role": "assistant", "content": "Sunny."},
    ]
    assert conversations[1]["tools"] == [WEATHER_TOOL]
    json.dumps(conversations)  # fine-tuning JSONL lines must serialise


def test_tool_calls_attached_from_child_tool_spans_and_tools_derived():
    f = SpanFactory()
    llm = f.span(
        "openai.chat.completion",
        {
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "Weather in Oslo?",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
        },
        start=0,
        end=5,
    )
    # AgentOps records each tool call as a child span.
    f.span("unrelated", {"foo": "bar"}, parent=llm, start=1, end=2)
    tool_span = f.span(
        "tool_call.get_weather",
        {
            "agentops.span.kind": "tool",
            "tool.name": "get_weather",
            "tool.parameters": '{"city": "Oslo", "days": 2}',
            "tool.call.id": "call_9",
            "tool.call.type": "function",
        },
        parent=llm,
        start=2,
        end=3,
    )
    (plain,) = TraceToMessages().adapt([llm, tool_span])
    assert plain["tools"] is None  # the request declared no tools (v0.3)
    (conversation,) = TraceToMessages(derive_tools=True).adapt([llm, tool_span])
    assert (
        conversation["messages"][-1]
        == plain["messages"][-1]
        == {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "days": 2}'},
                }
            ],
        }
    )
    assert conversation["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                    "required": ["city", "days"],
                },
            },
        }
    ]


def test_no_tools_gives_none():
    f = SpanFactory()
    (conversation,) = TraceToMessages().adapt([f.openai_call([{"role": "user", "content": "hi"}], "hello")])
    assert conversation == {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "tools": None,
    }


def test_nested_spans_of_one_call_and_repeated_response_ids_give_one_conversation():
    f = SpanFactory()
    outer = f.openllmetry_langchain_chat([{"role": "human", "content": "hi"}], "hello", start=0, end=10)
    inner = f.openai_call([{"role": "user", "content": "hi"}], "hello", response_id="r", parent=outer, start=1, end=2)
    copy = f.openai_call([{"role": "user", "content": "hi"}], "hello", response_id="r", start=3, end=4)
    conversations = TraceToMessages().adapt([outer, inner, copy])
    assert len(conversations) == 1
    assert conversations[0]["messages"][0] == {"role": "user", "content": "hi"}  # the inner, OpenAI-shaped span


def test_spans_without_messages_are_skipped():
    f = SpanFactory()
    spans = [f.span("agent", {"agent.name": "a"}), f.span("meta", {"gen_ai.request.model": "m"}), f.reward(1.0)]
    assert TraceToMessages().adapt(spans) == []


def test_multimodal_content_is_decoded_to_parts():
    f = SpanFactory()
    parts = [{"type": "text", "text": "what?"}, {"type": "image_url", "image_url": {"url": "data:x"}}]
    (conversation,) = TraceToMessages().adapt([f.openai_call([{"role": "user", "content": parts}], "a cat")])
    assert conversation["messages"][0] == {"role": "user", "content": parts}


@pytest.mark.parametrize(
    "attributes",
    [
        {"gen_ai.prompt.0": "just a string"},
        {"gen_ai.prompt.0.role": "user", "gen_ai.prompt.2.role": "user"},
        {"gen_ai.prompt.first.role": "user"},
        {"gen_ai.prompt": "[1, 2]"},
        {"gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.tool_calls.1.name": "x"},
    ],
)
def test_wrong_shapes_raise_value_error(attributes: Attributes):
    f = SpanFactory()
    with pytest.raises(ValueError, match=r"must|indexed"):
        TraceToMessages().adapt([f.span("openai.chat.completion", attributes)])
