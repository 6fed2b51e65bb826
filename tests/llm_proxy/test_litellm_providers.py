"""Any LiteLLM provider behind the proxy (with the `litellm` extra), and a clear refusal without it.

The Anthropic provider of LiteLLM is pointed at the loopback server's Anthropic-style `/v1/messages`
route, so a real provider translation runs over real HTTP, offline.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import httpx
import openai
import pytest

from agentlightning.llm_proxy.models import ModelRouter
from agentlightning.llm_proxy.proxy import LLMProxy
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import AttemptedRollout
from tests.support.openai_server import ErrorReply, OpenAITestServer, Reply, ToolCall, scripted

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

HI: list[Any] = [{"role": "user", "content": "Weather?"}]


def claude_entry(server: OpenAITestServer, name: str = "claude") -> Any:
    root = server.base_url.removesuffix("/v1")
    return {"model_name": name, "litellm_params": {"model": "anthropic/claude-test", "api_base": root, "api_key": "k"}}


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"model_name": "m", "litellm_params": {"model": "anthropic/claude"}}, "provider 'anthropic'"),
        ({"model_name": "m", "litellm_params": {"model": "gemini/g", "api_key": "k"}}, "provider 'gemini'"),
        (
            {"model_name": "m", "litellm_params": {"model": "hosted_vllm/x", "api_base": "http://h:1/v1", "rpm": 10}},
            "litellm_params ['rpm'] are LiteLLM options",
        ),
    ],
)
def test_without_the_extra_other_providers_are_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, entry: Any, needle: str
) -> None:
    monkeypatch.setattr("agentlightning.llm_proxy.models.litellm_available", lambda: False)
    with pytest.raises(ValueError) as info:
        ModelRouter([entry])
    assert needle in str(info.value)
    assert "pip install agentlightning[litellm]" in str(info.value)


def test_without_the_extra_openai_compatible_entries_keep_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agentlightning.llm_proxy.models.litellm_available", lambda: False)
    (deployment,) = ModelRouter(
        [{"model_name": "p", "litellm_params": {"model": "hosted_vllm/q", "api_base": "http://h:1/v1"}}]
    ).resolve("p")
    assert not deployment.via_litellm and deployment.url("chat/completions") == "http://h:1/v1/chat/completions"


pytest.importorskip("litellm", reason="needs the litellm extra")


def test_every_provider_entry_is_accepted_with_the_extra() -> None:
    entries: Any = [
        {"model_name": "claude", "litellm_params": {"model": "anthropic/claude-3-5-sonnet", "api_key": "k"}},
        {
            "model_name": "azure",
            "litellm_params": {
                "model": "azure/gpt-4o",
                "api_base": "https://x.openai.azure.com",
                "api_version": "2024-06-01",
            },
        },
        {"model_name": "gemini", "litellm_params": {"model": "gemini/gemini-2.0-flash", "api_key": "k"}},
        {
            "model_name": "bedrock",
            "litellm_params": {"model": "bedrock/anthropic.claude-3", "aws_region_name": "us-east-1"},
        },
        {"model_name": "vllm", "litellm_params": {"model": "hosted_vllm/q", "api_base": "http://h:1/v1", "rpm": 5}},
        {"model_name": "*", "litellm_params": {"model": "anthropic/*"}},
    ]
    router = ModelRouter(entries)
    assert all(router.resolve(name)[0].via_litellm for name in ["claude", "azure", "gemini", "bedrock", "vllm"])
    assert router.resolve("azure")[0].litellm_params["api_version"] == "2024-06-01"  # type: ignore[index]
    wildcard = router.resolve("claude-opus")[0]
    assert wildcard.backend_model == "anthropic/claude-opus"
    assert wildcard.litellm_params is not None and wildcard.litellm_params["model"] == "anthropic/claude-opus"


def test_one_model_name_cannot_mix_litellm_and_fast_path_entries() -> None:
    entries: Any = [
        {"model_name": "p", "litellm_params": {"model": "hosted_vllm/q", "api_base": "http://h:1/v1"}},
        {"model_name": "p", "litellm_params": {"model": "anthropic/claude", "api_key": "k"}},
    ]
    with pytest.raises(ValueError, match=r"model_list\[1\] \('p'\) mixes a LiteLLM-served entry"):
        ModelRouter(entries)


async def test_chat_completions_through_a_litellm_provider_plain_streamed_and_recorded(
    make_proxy: Any, store: InMemoryLightningStore, attempt: AttemptedRollout
) -> None:
    replies = [
        Reply(content="It is sunny."),
        Reply(tool_calls=[ToolCall("get_weather", {"city": "Rome"}, id="toolu_1")]),
    ]
    with OpenAITestServer(scripted(replies)) as backend:
        proxy = await make_proxy([claude_entry(backend)])
        base = f"{proxy.endpoint}/rollout/{attempt.rollout_id}/attempt/{attempt.attempt.attempt_id}/v1"
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)
        plain = await client.chat.completions.create(model="claude", messages=HI, max_tokens=32, temperature=0.1)
        tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
        stream = await client.chat.completions.create(
            model="claude", messages=HI, max_tokens=32, tools=tools, stream=True
        )
        chunks = [chunk async for chunk in stream]
        await client.close()
    assert plain.choices[0].message.content == "It is sunny."
    assert any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    sent = backend.requests
    assert sent[0]["model"] == "claude-test" and sent[0]["max_tokens"] == 32
    assert "return_token_ids" not in sent[0]  # vLLM-only field, not sent to other providers
    assert sent[1]["stream"] is True
    spans = [s for s in await store.query_spans(attempt.rollout_id) if s.name == "openai.chat.completion"]
    assert len(spans) == 2
    assert spans[0].attributes["gen_ai.completion.0.content"] == "It is sunny."
    assert spans[0].attributes["agentlightning.llm_proxy.backend_model"] == "anthropic/claude-test"
    assert spans[0].attributes["gen_ai.request.model"] == "claude"
    assert spans[1].attributes["gen_ai.completion.0.tool_calls.0.name"] == "get_weather"


async def test_messages_route_through_a_litellm_provider(make_proxy: Any) -> None:
    anthropic = pytest.importorskip("anthropic", reason="needs the anthropic extra")
    with OpenAITestServer(scripted(["Hello from the provider."])) as backend:
        proxy = await make_proxy([claude_entry(backend)])
        client = anthropic.AsyncAnthropic(base_url=proxy.endpoint, api_key="k", max_retries=0)
        async with client.messages.stream(model="claude", max_tokens=16, messages=HI) as stream:
            text = "".join([t async for t in stream.text_stream])
        await client.close()
    assert text == "Hello from the provider."


async def test_provider_errors_reach_the_client_with_their_status(make_proxy: Any) -> None:
    with OpenAITestServer(lambda _: ErrorReply(400, "max_tokens too large")) as backend:
        proxy = await make_proxy([claude_entry(backend)])
        async with httpx.AsyncClient() as http:
            response = await http.post(
                f"{proxy.endpoint}/v1/chat/completions", json={"model": "claude", "messages": HI, "max_tokens": 5}
            )
    assert response.status_code == 400
    assert "max_tokens too large" in response.json()["error"]["message"]


def test_litellm_config_keys_of_the_reference_are_honoured(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGL_TEST_PROVIDER_KEY", "before")  # restored after the test
    config = {
        "model_list": [{"model_name": "claude", "litellm_params": {"model": "anthropic/claude-3", "api_key": "k"}}],
        "litellm_settings": {"num_retries": 2, "drop_params": True},
        "router_settings": {"timeout": 45},
        "environment_variables": {"AGL_TEST_PROVIDER_KEY": "secret"},
        "general_settings": {"master_key": "sk-1"},
    }
    with caplog.at_level(logging.WARNING, logger="agentlightning.llm_proxy.proxy"):
        proxy = LLMProxy(litellm_config=config, launch_mode="thread")
    assert (proxy.num_retries, proxy.request_timeout) == (2, 45.0)
    assert proxy.litellm_module_settings == {"drop_params": True}
    assert os.environ["AGL_TEST_PROVIDER_KEY"] == "secret"
    assert "['general_settings']" in caplog.text


async def test_a_vllm_entry_with_litellm_options_still_records_token_ids(
    make_proxy: Any, store: InMemoryLightningStore, attempt: AttemptedRollout
) -> None:
    with OpenAITestServer(scripted(["one two", "three"])) as backend:
        entry = {
            "model_name": "p",
            "litellm_params": {"model": "hosted_vllm/q", "api_base": backend.base_url, "rpm": 60},
        }
        proxy = await make_proxy([entry])
        base = f"{proxy.endpoint}/rollout/{attempt.rollout_id}/attempt/{attempt.attempt.attempt_id}/v1"
        client = openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0)
        await client.chat.completions.create(model="p", messages=HI)
        stream = await client.chat.completions.create(model="p", messages=HI, stream=True)
        assert [c async for c in stream]
        await client.close()
    assert all(request["return_token_ids"] is True for request in backend.requests)
    spans = [s for s in await store.query_spans(attempt.rollout_id) if s.name == "openai.chat.completion"]
    assert len(spans) == 2
    for span, served in zip(spans, backend.responses, strict=True):
        assert span.attributes["agentlightning.llm_proxy.backend_model"] == "hosted_vllm/q"
        assert span.attributes["prompt_token_ids"] == served["prompt_token_ids"]
        assert span.attributes["response_token_ids"] == served["choices"][0]["token_ids"]
