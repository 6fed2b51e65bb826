"""SSE both ways: rebuilding complete responses from relayed bytes, and re-emitting responses as streams."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentlightning.llm_proxy.streaming import CompletionAccumulator, SSEResponseRecorder, response_to_sse_events
from tests.support.openai_server import OpenAITestServer, Reply, ToolCall


def _completion(reply: Reply, *, logprobs: bool = True) -> Any:
    """The loopback server's answer object, which renders itself both complete and streamed."""
    body = {"messages": [{"role": "user", "content": "hi"}], "return_token_ids": True, "logprobs": logprobs}
    return OpenAITestServer()._complete(body, reply)  # pyright: ignore[reportPrivateUsage]


REPLY = Reply(content="Let me check that", tool_calls=[ToolCall(name="lookup", arguments={"q": "x"}, id="call_9")])


def _comparable(response: dict[str, Any]) -> dict[str, Any]:
    choice = response["choices"][0]
    return {
        "prompt_token_ids": response.get("prompt_token_ids"),
        "token_ids": choice.get("token_ids"),
        "content": choice["message"].get("content"),
        "tool_calls": choice["message"].get("tool_calls"),
        "finish_reason": choice.get("finish_reason"),
        "logprobs": choice.get("logprobs"),
        "usage": response.get("usage"),
    }


@pytest.mark.parametrize("split", [1, 7, 10_000])
def test_recorder_rebuilds_the_unstreamed_response_from_bytes_split_anywhere(split: int):
    completion = _completion(REPLY)
    data = "".join(completion.stream_events(include_usage=True)).encode()
    recorder = SSEResponseRecorder("chat")
    seen_done = [recorder.feed(data[i : i + split]) for i in range(0, len(data), split)]
    assert seen_done[-1] is True and not any(seen_done[:-1])
    assert _comparable(recorder.to_response()) == _comparable(completion.to_response())
    assert recorder.n_events > 5


def test_recorder_handles_crlf_events_and_keeps_error_chunks():
    recorder = SSEResponseRecorder("chat")
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"}, "token_ids": [7]}]}
    recorder.feed(f"data: {json.dumps(chunk)}\r\n\r\n".encode())
    recorder.feed(b": keep-alive comment\r\n\r\n")
    recorder.feed(b'data: {"error": {"message": "engine died"}}\r\n\r\n')
    assert recorder.error == '{"message": "engine died"}'
    assert recorder.to_response()["choices"][0]["message"]["content"] == "hi"
    assert recorder.done is False
    assert recorder.feed(b"data: [DONE]\r\n\r\n") is True


def test_reemitted_stream_rebuilds_the_same_response():
    complete = _completion(REPLY).to_response()
    events = response_to_sse_events("chat", complete, include_usage=True)
    assert events[-1] == b"data: [DONE]\n\n"
    recorder = SSEResponseRecorder("chat")
    assert recorder.feed(b"".join(events)) is True
    assert _comparable(recorder.to_response()) == _comparable(complete)


def test_reemitted_stream_leaves_usage_out_unless_asked():
    complete = _completion(Reply(content="ok"), logprobs=False).to_response()
    events = response_to_sse_events("chat", complete, include_usage=False)
    assert not any(b'"usage"' in event for event in events)


def test_completion_accumulator_concatenates_text_token_ids_and_logprobs():
    accumulator = CompletionAccumulator()
    accumulator.add(
        {
            "id": "cmpl-1",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "text": "Hello",
                    "prompt_token_ids": [1, 2],
                    "token_ids": [10],
                    "logprobs": {"tokens": ["Hello"], "token_logprobs": [-0.1]},
                }
            ],
        }
    )
    accumulator.add(
        {
            "id": "cmpl-1",
            "choices": [
                {
                    "index": 0,
                    "text": " world",
                    "token_ids": [11],
                    "finish_reason": "stop",
                    "logprobs": {"tokens": [" world"], "token_logprobs": [-0.2]},
                }
            ],
        }
    )
    accumulator.add({"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 2}})
    response = accumulator.to_response()
    (choice,) = response["choices"]
    assert choice["text"] == "Hello world"
    assert choice["token_ids"] == [10, 11]
    assert choice["prompt_token_ids"] == [1, 2]
    assert choice["finish_reason"] == "stop"
    assert choice["logprobs"] == {"tokens": ["Hello", " world"], "token_logprobs": [-0.1, -0.2]}
    assert response["usage"] == {"prompt_tokens": 2, "completion_tokens": 2}
    events = response_to_sse_events("completion", response, include_usage=True)
    recorder = SSEResponseRecorder("completion")
    recorder.feed(b"".join(events))
    assert recorder.to_response()["choices"][0]["token_ids"] == [10, 11]


MALFORMED_EVENTS = {
    "not_json": b"data: {not json\n\n",
    "nested_too_deep": b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n",
    "text_choice_index": b'data: {"choices": [{"index": "zero", "delta": {"content": "x"}}]}\n\n',
    "huge_choice_index": b'data: {"choices": [{"index": 10000000000, "text": "x"}]}\n\n',
    "negative_choice_index": b'data: {"choices": [{"index": -1, "delta": {"content": "x"}}]}\n\n',
}


@pytest.mark.parametrize("kind", ["chat", "completion"])
@pytest.mark.parametrize("bad", list(MALFORMED_EVENTS), ids=list(MALFORMED_EVENTS))
def test_a_malformed_event_is_left_out_and_noted_never_raised(kind: str, bad: str) -> None:
    good = [
        b'data: {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hel"}, "text": "Hel"}]}\n\n',
        b'data: {"choices": [{"index": 0, "delta": {"content": "lo"}, "text": "lo", "finish_reason": "stop"}]}\n\n',
    ]
    recorder = SSEResponseRecorder(kind)  # type: ignore[arg-type]
    recorder.feed(good[0])
    recorder.feed(MALFORMED_EVENTS[bad])
    assert recorder.feed(good[1] + b"data: [DONE]\n\n") is True
    response = recorder.to_response()
    (choice,) = response["choices"]
    assert (choice["message"]["content"] if kind == "chat" else choice["text"]) == "Hello"
    assert recorder.error is not None and "1 malformed event" in recorder.error
    assert recorder.backend_error is None


def test_a_huge_tool_call_index_is_malformed_not_a_billion_empty_calls() -> None:
    recorder = SSEResponseRecorder("chat")
    recorder.feed(b'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 999999999}]}}]}\n\n')
    assert recorder.to_response()["choices"] == [] and recorder.error is not None
