"""`/v1/responses` and `/v1/messages` through the proxy, served by a chat-completions backend.

The OpenAI Responses client (and so the Agents SDK) and the Anthropic client (a Claude-Code-style agent)
talk to the proxy in their own format; the backend sees chat completions with `return_token_ids`, and
each call is one span with the token ids, plain or streamed. Bad input gets a 4xx in the client's format.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.llm_proxy.proxy import LLMProxy
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import AttemptedRollout
from tests.support.openai_server import OpenAITestServer, Reply, ToolCall, scripted

from .conftest import model_entry

anthropic = pytest.importorskip("anthropic", reason="needs the anthropic extra")

TOOL_REPLY = Reply(tool_calls=[ToolCall("get_weather", {"city": "Rome"}, id="call_7")])


def rollout_base(proxy: LLMProxy, attempt: AttemptedRollout) -> str:
    return f"{proxy.endpoint}/rollout/{attempt.rollout_id}/attempt/{attempt.attempt.attempt_id}"


async def _calls(store: InMemoryLightningStore, attempt: AttemptedRollout) -> list[Any]:
    spans = list(await store.query_spans(attempt.rollout_id))
    return [s for s in spans if s.name == "openai.chat.completion"]


def _assert_token_ids(span: Any, served: dict[str, Any]) -> None:
    assert span.attributes["prompt_token_ids"] == served["prompt_token_ids"]
    assert span.attributes["response_token_ids"] == served["choices"][0]["token_ids"]


async def test_responses_route_plain_and_streamed_with_token_ids(
    make_proxy: Any, store: InMemoryLightningStore, attempt: AttemptedRollout
) -> None:
    with OpenAITestServer(scripted(["It is sunny.", TOOL_REPLY, "Done."])) as backend:
        proxy = await make_proxy([model_entry("policy", backend)])
        client = openai.AsyncOpenAI(base_url=rollout_base(proxy, attempt) + "/v1", api_key="k", max_retries=0)
        tools: Any = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
        first = await client.responses.create(model="policy", instructions="Be terse.", input="Weather?")
        second = await client.responses.create(model="policy", input="Rome?", tools=tools, tool_choice="auto")
        follow_up: Any = [
            {"role": "user", "content": "Rome?"},
            {"type": "function_call", "call_id": "call_7", "name": "get_weather", "arguments": '{"city": "Rome"}'},
            {"type": "function_call_output", "call_id": "call_7", "output": "sunny"},
        ]
        stream = await client.responses.create(model="policy", input=follow_up, stream=True, max_output_tokens=20)
        events = [event async for event in stream]
        await client.close()
    assert first.output_text == "It is sunny."
    assert (
        first.model_extra is not None
        and first.model_extra["token_ids"] == backend.responses[0]["choices"][0]["token_ids"]
    )
    call = second.output[0]
    assert (
        call.type == "function_call" and call.name == "get_weather" and json.loads(call.arguments) == {"city": "Rome"}
    )
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Done."
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "Done."
    sent = backend.requests
    assert sent[0]["messages"] == [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Weather?"}]
    assert sent[0]["return_token_ids"] is True
    assert sent[1]["tools"][0]["function"]["name"] == "get_weather"
    assert [m["role"] for m in sent[2]["messages"]] == ["user", "assistant", "tool"]
    assert sent[2]["max_tokens"] == 20 and sent[2]["stream"] is True
    spans = await _calls(store, attempt)
    assert len(spans) == 3
    for span, served in zip(spans, backend.responses, strict=True):
        _assert_token_ids(span, served)
        assert span.attributes["agentlightning.llm_proxy.client_api"] == "responses"
    assert spans[2].attributes["gen_ai.completion.0.content"] == "Done."
    assert len(TracerTraceToTriplet().adapt(spans)) == 3


async def test_messages_route_plain_and_streamed_with_tool_use(
    make_proxy: Any, store: InMemoryLightningStore, attempt: AttemptedRollout
) -> None:
    with OpenAITestServer(scripted([TOOL_REPLY, "Sunny in Rome.", "Bye."])) as backend:
        proxy = await make_proxy([model_entry("claude-policy", backend)])
        client = anthropic.AsyncAnthropic(base_url=rollout_base(proxy, attempt), api_key="k", max_retries=0)
        tools: Any = [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}]
        first = await client.messages.create(
            model="claude-policy",
            max_tokens=64,
            system="Be terse.",
            tools=tools,
            messages=[{"role": "user", "content": "Weather in Rome?"}],
        )
        assert first.stop_reason == "tool_use"
        tool_use = first.content[0]
        assert tool_use.type == "tool_use" and tool_use.input == {"city": "Rome"}
        history: Any = [
            {"role": "user", "content": "Weather in Rome?"},
            {"role": "assistant", "content": [block.model_dump() for block in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "sunny"}]},
        ]
        async with client.messages.stream(
            model="claude-policy", max_tokens=64, tools=tools, messages=history
        ) as stream:
            text = "".join([t async for t in stream.text_stream])
            final = await stream.get_final_message()
        raw = await client.messages.create(
            model="claude-policy", max_tokens=8, messages=[{"role": "user", "content": "bye"}], stream=True
        )
        kinds = [event.type async for event in raw]
        await client.close()
    assert text == "Sunny in Rome." and final.stop_reason == "end_turn"
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    second = backend.requests[1]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "tool"]
    assert second["messages"][2] == {"role": "tool", "tool_call_id": tool_use.id, "content": "sunny"}
    assert second["stream"] is True and second["return_token_ids"] is True
    spans = await _calls(store, attempt)
    assert len(spans) == 3
    for span, served in zip(spans, backend.responses, strict=True):
        _assert_token_ids(span, served)
        assert span.attributes["agentlightning.llm_proxy.client_api"] == "messages"
    assert spans[1].attributes["gen_ai.completion.0.content"] == "Sunny in Rome."


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("responses", {"model": "policy"}, "'input'"),
        ("responses", {"model": "policy", "input": 5}, "'input' must be a string or a list"),
        ("responses", {"model": "policy", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ("responses", {"model": "policy", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
        ("responses", {"model": "policy", "input": [{"type": "computer_call"}]}, "input[0]"),
        ("responses", {"input": "x"}, "'model'"),
        ("messages", {"model": "policy", "messages": [{"role": "user", "content": "x"}]}, "'max_tokens'"),
        ("messages", {"model": "policy", "max_tokens": 5, "messages": []}, "'messages'"),
        ("messages", {"model": "policy", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, "role"),
        ("messages", {"model": "policy", "max_tokens": 5, "messages": [{"role": "user", "content": 3}]}, "content"),
        ("messages", {"model": "policy", "max_tokens": 5, "messages": "hi"}, "'messages'"),
    ],
)
async def test_bad_requests_get_a_400_in_the_clients_format(
    proxy: LLMProxy, backend: OpenAITestServer, path: str, body: dict[str, Any], needle: str
) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{proxy.endpoint}/v1/{path}", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert needle in error["message"]
    if path == "messages":
        assert response.json()["type"] == "error" and error["type"] == "invalid_request_error"
    assert backend.requests == []


async def test_non_json_and_unknown_model_on_messages_route(proxy: LLMProxy) -> None:
    async with httpx.AsyncClient() as http:
        not_json = await http.post(f"{proxy.endpoint}/v1/messages", content=b"{nope")
        unknown = await http.post(
            f"{proxy.endpoint}/v1/messages",
            json={"model": "gpt-x", "max_tokens": 3, "messages": [{"role": "user", "content": "x"}]},
        )
    assert not_json.status_code == 400 and not_json.json()["type"] == "error"
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"


async def test_backend_errors_reach_anthropic_and_responses_clients_as_errors(make_proxy: Any) -> None:
    from tests.support.openai_server import ErrorReply

    with OpenAITestServer(lambda _: ErrorReply(422, "bad sampling")) as backend:
        proxy = await make_proxy([model_entry("policy", backend)])
        claude = anthropic.AsyncAnthropic(base_url=proxy.endpoint, api_key="k", max_retries=0)
        with pytest.raises(anthropic.UnprocessableEntityError, match="bad sampling"):
            await claude.messages.create(model="policy", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        oai = openai.AsyncOpenAI(base_url=f"{proxy.endpoint}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.UnprocessableEntityError, match="bad sampling"):
            await oai.responses.create(model="policy", input="x")
        await claude.close()
        await oai.close()


async def test_an_agents_sdk_agent_runs_against_a_chat_only_backend_through_the_proxy(
    make_proxy: Any, store: InMemoryLightningStore, attempt: AttemptedRollout
) -> None:
    agents = pytest.importorskip("agents", reason="needs the openai-agents package (dev extra)")
    agents.set_tracing_disabled(True)

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather of a city."""
        return f"{city}: sunny"

    with OpenAITestServer(scripted([TOOL_REPLY, "Sunny in Rome."])) as backend:
        proxy = await make_proxy([model_entry("policy", backend)])
        client = openai.AsyncOpenAI(base_url=rollout_base(proxy, attempt) + "/v1", api_key="k", max_retries=0)
        model = agents.OpenAIResponsesModel(model="policy", openai_client=client)
        agent = agents.Agent(name="weather", instructions="Use the tool.", tools=[get_weather], model=model)
        result = await agents.Runner.run(agent, "Weather in Rome?")
        await client.close()
    assert result.final_output == "Sunny in Rome."
    assert backend.requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_7", "content": "Rome: sunny"}
    spans = await _calls(store, attempt)
    triplets = TracerTraceToTriplet().adapt(spans)
    assert len(triplets) == 2
    for triplet, served in zip(triplets, backend.responses, strict=True):
        assert triplet.prompt["token_ids"] == served["prompt_token_ids"]
        assert triplet.response["token_ids"] == served["choices"][0]["token_ids"]
