"""Chat prompts with tools, and tool calls parsed out of model text."""

from __future__ import annotations

import json

import pytest

from agentlightning.serving.chat import normalize_messages, parse_tool_calls, render_chat_prompt
from tests.support.tiny_model import tiny_tokenizer

pytestmark = pytest.mark.train

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_prompt_ends_with_the_assistant_header_and_round_trips() -> None:
    tokenizer = tiny_tokenizer()
    ids = render_chat_prompt(tokenizer, [{"role": "user", "content": "hello"}])
    assert tokenizer.decode(ids) == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"


def test_tools_are_listed_in_the_system_prompt_with_the_call_format() -> None:
    tokenizer = tiny_tokenizer()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "weather?"}]
    text = tokenizer.decode(render_chat_prompt(tokenizer, messages, [WEATHER_TOOL]))
    assert text.startswith("<|im_start|>system\nBe brief.\n\nYou can call functions")
    assert '"name": "get_weather"' in text and "<tool_call>" in text
    # Without a system message, one is added.
    text = tokenizer.decode(render_chat_prompt(tokenizer, messages[1:], [WEATHER_TOOL]))
    assert text.startswith("<|im_start|>system\nYou can call functions")


def test_assistant_tool_calls_and_content_parts_become_text() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    normalized = normalize_messages(messages, None, template_has_tools=False)
    assert normalized[0]["content"] == "ab"
    assert normalized[1]["content"] == '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    assert normalized[2] == {"role": "tool", "content": "42"}


def test_templates_that_know_tools_get_them_passed_through() -> None:
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = "{% for t in tools %}[{{ t['function']['name'] }}]{% endfor %}" + tokenizer.chat_template
    text = tokenizer.decode(render_chat_prompt(tokenizer, [{"role": "user", "content": "hi"}], [WEATHER_TOOL]))
    assert text.startswith("[get_weather]<|im_start|>user\nhi")


def test_bad_messages_are_rejected_with_the_reason() -> None:
    tokenizer = tiny_tokenizer()
    with pytest.raises(ValueError, match="role"):
        render_chat_prompt(tokenizer, [{"content": "no role"}])
    with pytest.raises(ValueError, match="text only"):
        render_chat_prompt(tokenizer, [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match="chat template"):
        render_chat_prompt(tokenizer, [{"role": "user", "content": "x"}])


def test_parse_tool_calls_extracts_calls_and_keeps_the_rest() -> None:
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Let me check."
    assert len(calls) == 1 and calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}


def test_parse_tool_calls_handles_several_unclosed_and_invalid_blocks() -> None:
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": "{}"}'
    content, calls = parse_tool_calls(text)
    assert content is None and [c["function"]["name"] for c in calls] == ["a", "b"]
    assert calls[1]["function"]["arguments"] == "{}"
    assert parse_tool_calls("<tool_call>not json</tool_call>") == ("<tool_call>not json</tool_call>", [])
    assert parse_tool_calls("plain answer") == ("plain answer", [])


def test_templates_that_render_tool_calls_get_the_arguments_as_an_object() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": None, "tool_calls": [call]}]
    normalized = normalize_messages(messages, [WEATHER_TOOL], template_has_tools=True)
    assert normalized[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert call["function"]["arguments"] == '{"city": "Paris"}'  # the request itself is left as it came
    broken = {**call, "function": {"name": "get_weather", "arguments": "{not json"}}
    kept = normalize_messages(
        [{"role": "assistant", "content": "", "tool_calls": [broken]}], None, template_has_tools=True
    )
    assert kept[0]["tool_calls"][0]["function"]["arguments"] == "{not json"


def test_a_reply_that_is_one_json_call_is_a_llama3_tool_call() -> None:
    content, calls = parse_tool_calls(' {"name": "get_weather", "parameters": {"city": "Paris"}}\n')
    assert content is None
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    for text in ('{"city": "Paris"}', '{"name": "x"}', "{not json}", 'It is {"name": "a", "parameters": {}}'):
        assert parse_tool_calls(text) == (text, [])
