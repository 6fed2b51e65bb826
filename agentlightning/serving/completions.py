"""A chat completion on the policy server, from validated request to response dict (shared by every API).

`/v1/chat/completions` answers with `complete_chat`'s dict as is; `/v1/responses` and `/v1/messages`
(`apis.py`) translate their requests to a `ChatCompletionRequest`, go through the same two steps, and
translate the answer back, token ids and logprobs included.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Dict, List, Optional, Protocol, TypeVar

from .adapters import adapter_model_name, resolve_adapter
from .chat import parse_tool_calls, render_chat_text
from .engine import CompletionStream, PolicyEngine, SequenceDelta, SequenceEnd
from .protocol import ChatCompletionRequest, logprobs_content, new_completion_id, now
from .sampled_turns import SampledTurns

if TYPE_CHECKING:
    from starlette.requests import Request

__all__ = [
    "ClientGone",
    "ServedPolicy",
    "submit_chat",
    "complete_chat",
    "unless_disconnected",
    "usage",
    "wants_token_ids",
]

T = TypeVar("T")


class ServedPolicy(Protocol):
    """What answering a chat needs of the policy server (`server.PolicyServer` is one)."""

    @property
    def engine(self) -> PolicyEngine: ...

    @property
    def model_name(self) -> str: ...

    @property
    def default_max_tokens(self) -> int: ...

    @property
    def always_logprobs(self) -> bool: ...

    @property
    def sampled_turns(self) -> Optional[SampledTurns]: ...


class ClientGone(Exception):
    """The HTTP client disconnected before its answer was ready; its generation was cancelled."""


async def unless_disconnected(
    request: Request, stream: CompletionStream, work: Awaitable[T], poll_s: float = 0.25
) -> T:
    """Await `work` (the answer to `stream`), but if the client goes away first, cancel the generation so
    its slots are free at the next decode step, and raise `ClientGone`."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll_s)
            if done:
                return task.result()
            if await request.is_disconnected():
                stream.cancel()
                raise ClientGone(f"client went away after {len(stream.prompt_ids)} prompt tokens")
    finally:
        if not task.done():
            task.cancel()


def wants_token_ids(body: ChatCompletionRequest) -> bool:
    return body.return_token_ids is not False


def usage(prompt_tokens: int, completion_tokens: int) -> Dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def submit_chat(server: ServedPolicy, body: ChatCompletionRequest) -> CompletionStream:
    """Render the prompt and hand it to the engine (earlier turns as sampled: see `sampled_turns.py`).

    Raises:
        UnknownAdapterError: `model` names an adapter the server does not have (answer 404).
        ValueError: the messages cannot be rendered or sampled as asked (answer 400).
    """
    engine = server.engine
    adapter = resolve_adapter(body.model, server.model_name, engine.adapters)
    text = render_chat_text(engine.tokenizer, body.messages, body.prompt_tools(), **(body.chat_template_kwargs or {}))
    turns = server.sampled_turns
    if turns is None:
        prompt_ids = list(engine.tokenizer(text, add_special_tokens=False)["input_ids"])
    else:
        prompt_ids = turns.encode(text)  # earlier turns keep the ids the model sampled
    stream = engine.submit(prompt_ids, body.sampling_params(server.default_max_tokens), body.n, adapter=adapter)
    if turns is not None:
        stream.on_end = lambda end: turns.remember(text, stream.prompt_ids, end.token_ids)
    return stream


async def complete_chat(server: ServedPolicy, body: ChatCompletionRequest, stream: CompletionStream) -> Dict[str, Any]:
    """The chat-completions response dict once every sequence of `stream` has ended."""
    tokenizer = server.engine.tokenizer
    tops: Dict[int, List[List[tuple[int, float]]]] = {i: [] for i in range(stream.n)}
    ends: List[SequenceEnd] = []
    async for event in stream:
        if isinstance(event, SequenceDelta):
            tops[event.index].append(event.top_logprobs)
        else:
            ends.append(event)
    choices: List[Dict[str, Any]] = []
    for end in sorted(ends, key=lambda e: e.index):
        content, tool_calls = parse_tool_calls(end.text) if body.prompt_tools() else (end.text, [])
        message: Dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        choice: Dict[str, Any] = {
            "index": end.index,
            "message": message,
            "finish_reason": "tool_calls" if tool_calls else end.finish_reason,
            "logprobs": None,
        }
        if body.logprobs or server.always_logprobs:
            entries = logprobs_content(tokenizer, end.token_ids, end.logprobs, tops[end.index])
            choice["logprobs"] = {"content": entries, "refusal": None}
        if wants_token_ids(body):
            choice["token_ids"] = end.token_ids
        choices.append(choice)
    response: Dict[str, Any] = {
        "id": new_completion_id(),
        "object": "chat.completion",
        "created": now(),
        "model": adapter_model_name(server.model_name, stream.adapter),
        "system_fingerprint": f"weights-v{ends[0].weights_version}" if ends else None,
        "choices": choices,
        "usage": usage(len(stream.prompt_ids), sum(len(e.token_ids) for e in ends)),
    }
    if wants_token_ids(body):
        response["prompt_token_ids"] = stream.prompt_ids
    return response
