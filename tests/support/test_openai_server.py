"""The loopback OpenAI-compatible server used by tests and examples behaves like a vLLM endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.openai_server import ErrorReply, OpenAITestServer, Reply, ToolCall, chat_prompt_token_ids, scripted


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer(scripted(["first answer", Reply(tool_calls=[ToolCall("lookup", {"q": "x"})])])) as server:
        yield server


def test_models_endpoint_and_request_recording(server: OpenAITestServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="k")
    assert [m.id for m in client.models.list()] == ["test-model"]
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}], temperature=0.3)
    assert server.requests[0]["temperature"] == 0.3
    assert server.responses[0]["choices"][0]["message"]["content"] == "first answer"


def test_token_ids_are_prefix_consistent_across_turns(server: OpenAITestServer) -> None:
    client = openai.OpenAI(base_url=server.base_url, api_key="k")
    messages: list[dict[str, object]] = [{"role": "user", "content": "hello there"}]
    first = client.chat.completions.create(model="m", messages=messages, extra_body={"return_token_ids": True})  # type: ignore[arg-type]
    first_prompt = first.model_extra["prompt_token_ids"]  # type: ignore[index]
    first_response = first.choices[0].model_extra["token_ids"]  # type: ignore[index]
    messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "more"}]
    second = client.chat.completions.create(model="m", messages=messages, extra_body={"return_token_ids": True})  # type: ignore[arg-type]
    second_prompt = second.model_extra["prompt_token_ids"]  # type: ignore[index]
    assert second_prompt[: len(first_prompt) + len(first_response)] == first_prompt + first_response
    assert first_prompt == chat_prompt_token_ids(messages[:1])  # type: ignore[arg-type]
    assert second.choices[0].message.tool_calls[0].function.name == "lookup"  # type: ignore[index]
    assert json.loads(second.choices[0].message.tool_calls[0].function.arguments) == {"q": "x"}  # type: ignore[index]


def test_stream_chunks_concatenate_to_the_unstreamed_reply() -> None:
    with OpenAITestServer(always_return_token_ids=True) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k")
        stream = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "a b c"}],
            stream=True,
            logprobs=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    served = server.responses[0]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    token_ids = [t for c in chunks if c.choices for t in (c.choices[0].model_extra or {}).get("token_ids", [])]
    logprobs = [
        entry.logprob
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for entry in c.choices[0].logprobs.content or []
    ]
    assert content == served["choices"][0]["message"]["content"] == "Echo: a b c"
    assert token_ids == served["choices"][0]["token_ids"]
    assert logprobs == [e["logprob"] for e in served["choices"][0]["logprobs"]["content"]]
    assert chunks[0].model_extra["prompt_token_ids"] == served["prompt_token_ids"]  # type: ignore[index]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == served["usage"]["total_tokens"]


def test_errors_and_bad_requests() -> None:
    with OpenAITestServer(lambda request: ErrorReply(503, "overloaded")) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        with pytest.raises(openai.InternalServerError, match="overloaded"):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        response = httpx.post(f"{server.base_url}/chat/completions", json={"model": "m"})
        assert response.status_code == 400


def test_responses_and_messages_routes_tokenize_like_the_chat_route() -> None:
    anthropic = pytest.importorskip("anthropic", reason="needs the anthropic extra")
    with OpenAITestServer(always_return_token_ids=True) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k")
        response = client.responses.create(model="m", instructions="sys", input="hello")
        message = anthropic.Anthropic(base_url=server.base_url.removesuffix("/v1"), api_key="k").messages.create(
            model="m", max_tokens=5, system="sys", messages=[{"role": "user", "content": "hello"}]
        )
        chat_messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]
        assert response.output_text == "Echo: hello" and message.content[0].text == "Echo: hello"  # type: ignore[union-attr]
        assert response.model_extra is not None and message.model_extra is not None
        assert response.model_extra["prompt_token_ids"] == chat_prompt_token_ids(chat_messages)
        assert message.model_extra["prompt_token_ids"] == chat_prompt_token_ids(chat_messages)
        with httpx.Client() as http:
            bad_responses = http.post(f"{server.base_url}/responses", json={"model": "m"})
            bad_messages = http.post(f"{server.base_url}/messages", json={"model": "m", "messages": []})
        assert bad_responses.status_code == 400 and bad_messages.status_code == 400
        assert bad_messages.json()["type"] == "error"
