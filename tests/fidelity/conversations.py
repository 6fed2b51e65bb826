"""What an agent does in one matrix cell: a one-call question, or a tool loop (a call that asks for a tool,
the tool's result, the answer), over chat completions, Responses or Messages, streamed or not, with the
official SDK clients (`openai`, `anthropic`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List

import openai

__all__ = ["QUESTION", "TOOL_RESULT", "ANSWER", "Endpoint", "converse"]

QUESTION = "What is the weather in Paris?"
TOOL_RESULT = "sunny, 21 degrees"
ANSWER = "It is sunny in Paris."
_FUNCTION = {
    "name": "get_weather",
    "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@dataclass(frozen=True)
class Endpoint:
    """Where the agent sends its calls: an OpenAI base URL (ends in /v1), the model name, the API key."""

    openai_base_url: str
    model: str
    api_key: str = "k"

    @property
    def anthropic_base_url(self) -> str:
        return self.openai_base_url.removesuffix("/v1")


async def converse(endpoint: Endpoint, api: str, stream: bool, tools: bool) -> str:
    """Run the cell's conversation; returns the final answer text (the tool loop has two model calls)."""
    if api == "messages":
        return await _messages(endpoint, stream, tools)
    client = openai.AsyncOpenAI(base_url=endpoint.openai_base_url, api_key=endpoint.api_key, max_retries=0)
    try:
        if api == "chat":
            return await _chat(client, endpoint.model, stream, tools)
        return await _responses(client, endpoint.model, stream, tools)
    finally:
        await client.close()


# Chat completions ----------------------------------------------------------------------------------------


async def _chat_call(client: openai.AsyncOpenAI, model: str, messages: List[Any], tools: bool, stream: bool) -> Any:
    """The assistant message of one call, as a dict the next request can send back."""
    extra: Dict[str, Any] = {"tools": [{"type": "function", "function": _FUNCTION}]} if tools else {}
    if not stream:
        response = await client.chat.completions.create(model=model, messages=messages, **extra)
        return response.choices[0].message.model_dump(exclude_none=True)
    content, calls = "", {}
    chunks = await client.chat.completions.create(model=model, messages=messages, stream=True, **extra)
    async for chunk in chunks:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(
                    call.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                entry["id"] += call.id or ""
                if call.function is not None:
                    entry["function"]["name"] += call.function.name or ""
                    entry["function"]["arguments"] += call.function.arguments or ""
    message: Dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return message


async def _chat(client: openai.AsyncOpenAI, model: str, stream: bool, tools: bool) -> str:
    messages: List[Any] = [{"role": "user", "content": QUESTION}]
    reply = await _chat_call(client, model, messages, tools, stream)
    if not tools:
        return str(reply.get("content") or "")
    (call,) = reply["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}, call
    messages += [reply, {"role": "tool", "tool_call_id": call["id"], "content": TOOL_RESULT}]
    final = await _chat_call(client, model, messages, tools, stream)
    return str(final.get("content") or "")


# Responses -----------------------------------------------------------------------------------------------


async def _responses_call(client: openai.AsyncOpenAI, model: str, items: List[Any], tools: bool, stream: bool) -> Any:
    extra: Dict[str, Any] = {"tools": [{"type": "function", **_FUNCTION}]} if tools else {}
    if not stream:
        return await client.responses.create(model=model, input=items, **extra)
    final = None
    events = await client.responses.create(model=model, input=items, stream=True, **extra)
    async for event in events:
        if event.type == "response.completed":
            final = event.response
    assert final is not None, "the stream ended without response.completed"
    return final


async def _responses(client: openai.AsyncOpenAI, model: str, stream: bool, tools: bool) -> str:
    items: List[Any] = [{"role": "user", "content": QUESTION}]
    response = await _responses_call(client, model, items, tools, stream)
    if not tools:
        return str(response.output_text)
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert json.loads(call.arguments) == {"city": "Paris"}, call
    items += [item.model_dump(exclude_none=True) for item in response.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": TOOL_RESULT})
    final = await _responses_call(client, model, items, tools, stream)
    return str(final.output_text)


# Messages ------------------------------------------------------------------------------------------------


async def _messages_call(client: Any, model: str, messages: List[Any], tools: bool, stream: bool) -> Any:
    extra: Dict[str, Any] = (
        {
            "tools": [
                {
                    "name": _FUNCTION["name"],
                    "description": _FUNCTION["description"],
                    "input_schema": _FUNCTION["parameters"],
                }
            ]
        }
        if tools
        else {}
    )
    if not stream:
        return await client.messages.create(model=model, max_tokens=256, messages=messages, **extra)
    async with client.messages.stream(model=model, max_tokens=256, messages=messages, **extra) as events:
        return await events.get_final_message()


async def _messages(endpoint: Endpoint, stream: bool, tools: bool) -> str:
    import anthropic

    client = anthropic.AsyncAnthropic(base_url=endpoint.anthropic_base_url, api_key=endpoint.api_key, max_retries=0)
    try:
        messages: List[Any] = [{"role": "user", "content": QUESTION}]
        message = await _messages_call(client, endpoint.model, messages, tools, stream)
        if not tools:
            return "".join(block.text for block in message.content if block.type == "text")
        (call,) = [block for block in message.content if block.type == "tool_use"]
        assert call.input == {"city": "Paris"}, call
        messages.append(
            {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in message.content]}
        )
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": TOOL_RESULT}]}
        )
        final = await _messages_call(client, endpoint.model, messages, tools, stream)
        return "".join(block.text for block in final.content if block.type == "text")
    finally:
        await client.close()
