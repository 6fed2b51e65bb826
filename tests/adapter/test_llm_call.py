"""Recognising LLM-call spans across instrumentation flavours, without catching other spans."""

from __future__ import annotations

import re

import pytest

from agentlightning.adapter.llm_call import DEFAULT_LLM_CALL_MATCH, looks_like_llm_call, response_id_of
from agentlightning.types import Attributes, Span


@pytest.mark.parametrize(
    "name",
    [
        "openai.chat.completion",  # ours, AgentOps
        "openai.chat",  # OpenLLMetry OpenAI
        "openai.completion",
        "openai.ChatCompletion.create",  # AgentOps, openai<1
        "ChatCompletion",  # OpenInference OpenAI
        "chat_model.llm",  # AgentOps LangChain callback
        "llm.llm",
        "ChatOpenAI.chat",  # OpenLLMetry LangChain
        "raw_gen_ai_request",  # LiteLLM
        "litellm_request",
    ],
)
def test_default_name_pattern_recognises_llm_span_names(name: str):
    assert re.search(DEFAULT_LLM_CALL_MATCH, name)


@pytest.mark.parametrize(
    "name",
    [
        "openai.embeddings",
        "agentlightning.annotation",
        "agentlightning.operation",
        "tool.get_weather",
        "RunnableSequence",
    ],
)
def test_default_name_pattern_ignores_other_spans(name: str):
    assert not re.search(DEFAULT_LLM_CALL_MATCH, name)


@pytest.mark.parametrize(
    "attributes",
    [
        {"gen_ai.prompt.0.role": "user"},
        {"gen_ai.completion.0.content": "x"},
        {"gen_ai.prompt": "[]"},  # AgentOps LangChain: one JSON attribute
        {"gen_ai.input.messages": "[]"},  # newer OpenLLMetry
        {"llm.input_messages.0.message.role": "user"},  # OpenInference
        {"openinference.span.kind": "LLM"},
        {"agentops.span.kind": "llm"},
        {"llm.request.type": "chat"},
        {"prompt_token_ids": [1, 2]},
        {"llm.hosted_vllm.choices": "[]"},
        {"agentlightning.operation.output.prompt_token_ids": [1]},
    ],
)
def test_llm_attributes_are_recognised(attributes: Attributes):
    assert looks_like_llm_call(Span.from_attributes(name="anything", attributes=attributes))


@pytest.mark.parametrize(
    "attributes",
    [
        {},
        {"agent.name": "a"},
        {"tool.name": "t", "tool.parameters": "{}"},
        {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 1.0},
        {"openinference.span.kind": "CHAIN"},
        {"gen_ai.request.model": "m"},
        {"gen_ai.prompt_template": "x"},
    ],
)
def test_other_attributes_are_not_llm_calls(attributes: Attributes):
    assert not looks_like_llm_call(Span.from_attributes(name="anything", attributes=attributes))


def test_response_id_sources():
    assert response_id_of(Span.from_attributes(attributes={"gen_ai.response.id": "a"})) == "a"
    assert response_id_of(Span.from_attributes(attributes={"agentlightning.operation.output.id": "b"})) == "b"
    assert response_id_of(Span.from_attributes(attributes={"gen_ai.response.id": ""})) is None
