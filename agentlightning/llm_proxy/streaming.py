"""Server-sent events both ways: rebuild a complete response from a backend stream as it passes through,
and re-emit a complete response as a stream (for `StreamConversionMiddleware`).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Optional

from agentlightning.instrumentation.openai_chat import ChatCompletionAccumulator, stream_index

from .call import CallKind

__all__ = ["CompletionAccumulator", "SSEResponseRecorder", "response_to_sse_events"]

logger = logging.getLogger(__name__)

DONE_EVENT = b"data: [DONE]\n\n"


def _int_list(value: Any) -> Optional[list[int]]:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):  # type: ignore[union-attr]
        return list(value)  # type: ignore[arg-type]
    return None


class CompletionAccumulator:
    """Rebuilds a legacy `/v1/completions` response (text, token ids, logprobs) from its streamed chunks.

    Like `ChatCompletionAccumulator`, never raises: a malformed chunk is skipped and noted in `malformed`.
    """

    def __init__(self) -> None:
        self._response: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}
        self.malformed: list[str] = []

    def add(self, chunk: dict[str, Any]) -> None:
        try:
            for raw in chunk.get("choices") or []:
                if isinstance(raw, dict):
                    stream_index(raw.get("index"), "choice", 0)  # type: ignore[union-attr]
            self._add(chunk)
        except (ValueError, TypeError, AttributeError) as exc:
            self.malformed.append(str(exc))

    def _add(self, chunk: dict[str, Any]) -> None:
        for key in ("id", "model", "created", "system_fingerprint"):
            if chunk.get(key) is not None and key not in self._response:
                self._response[key] = chunk[key]
        if chunk.get("usage"):
            self._response["usage"] = chunk["usage"]
        for raw in chunk.get("choices") or []:
            if not isinstance(raw, dict):
                continue
            delta: dict[str, Any] = raw  # type: ignore[assignment]
            index = stream_index(delta.get("index"), "choice", 0)
            choice = self._choices.setdefault(index, {"index": index, "text": ""})
            if delta.get("text"):
                choice["text"] += str(delta["text"])
            if delta.get("finish_reason") is not None:
                choice["finish_reason"] = delta["finish_reason"]
            token_ids = _int_list(delta.get("token_ids"))
            if token_ids is not None:
                choice.setdefault("token_ids", []).extend(token_ids)
            prompt_token_ids = _int_list(delta.get("prompt_token_ids"))
            if prompt_token_ids is not None:
                choice.setdefault("prompt_token_ids", prompt_token_ids)
            logprobs = delta.get("logprobs")
            if isinstance(logprobs, dict):
                merged: dict[str, Any] = choice.setdefault("logprobs", {})
                for key, value in logprobs.items():  # type: ignore[union-attr]
                    if isinstance(value, list):
                        merged.setdefault(key, []).extend(value)  # type: ignore[union-attr]

    def to_response(self) -> dict[str, Any]:
        response = dict(self._response)
        response["object"] = "text_completion"
        response["choices"] = [self._choices[i] for i in sorted(self._choices)]
        return response


class SSEResponseRecorder:
    """Parses SSE bytes as they stream through and accumulates the complete response.

    `feed` returns True once the terminating `data: [DONE]` event has been seen (so the caller can hold
    back that last event until the call is recorded). A chunk carrying an `error` object is kept as the
    call's error. A malformed event (not JSON, too deeply nested, a bad choice index...) never stops the
    stream: it is left out of the response and counted, and `error` then says so.
    """

    def __init__(self, kind: CallKind, on_chunk: Optional[Callable[[dict[str, Any]], None]] = None) -> None:
        self._accumulator: Any = ChatCompletionAccumulator() if kind == "chat" else CompletionAccumulator()
        self._on_chunk = on_chunk
        self._buffer = b""
        self.done = False
        self.n_events = 0
        self.malformed: list[str] = []
        self._error: Optional[str] = None

    @property
    def backend_error(self) -> Optional[str]:
        """The error event the backend sent, if any."""
        return self._error

    @property
    def error(self) -> Optional[str]:
        """The backend's own error event, else a note on malformed events, else None."""
        if self._error is not None:
            return self._error
        problems = self.malformed + list(self._accumulator.malformed)
        if not problems:
            return None
        return (
            f"the backend stream had {len(problems)} malformed event(s), left out of the recorded response "
            f"(first: {problems[0]})"
        )

    def feed(self, data: bytes) -> bool:
        self._buffer += data
        while True:
            end, sep_len = self._event_end()
            if end < 0:
                break
            event, self._buffer = self._buffer[:end], self._buffer[end + sep_len :]
            self._handle_event(event)
        return self.done

    def _event_end(self) -> tuple[int, int]:
        lf = self._buffer.find(b"\n\n")
        crlf = self._buffer.find(b"\r\n\r\n")
        if crlf >= 0 and (lf < 0 or crlf < lf):
            return crlf, 4
        return lf, 2

    def _handle_event(self, event: bytes) -> None:
        lines = [line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:")]
        if not lines:
            return
        payload = b"\n".join(lines)
        if payload.strip() == b"[DONE]":
            self.done = True
            return
        self.n_events += 1
        try:
            chunk = json.loads(payload)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
            self.malformed.append(f"not JSON ({type(exc).__name__}): {payload[:80]!r}")
            return
        if not isinstance(chunk, dict):
            self.malformed.append(f"a JSON {type(chunk).__name__}, not an object")
            return
        if chunk.get("error") is not None:
            self._error = json.dumps(chunk["error"]) if not isinstance(chunk["error"], str) else chunk["error"]
            return
        skipped = len(self._accumulator.malformed)
        self._accumulator.add(chunk)
        if self._on_chunk is not None and len(self._accumulator.malformed) == skipped:
            self._on_chunk(chunk)  # type: ignore[arg-type]

    def to_response(self) -> dict[str, Any]:
        """The response as if the backend had not streamed."""
        return self._accumulator.to_response()


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode("utf-8") + b"\n\n"


def _chat_events(response: dict[str, Any], include_usage: bool) -> list[bytes]:
    base = {
        "id": response.get("id"),
        "object": "chat.completion.chunk",
        "created": response.get("created"),
        "model": response.get("model"),
    }
    events: list[bytes] = []
    for position, choice in enumerate(response.get("choices") or []):
        index = choice.get("index", position)
        message = choice.get("message") or {}
        first: dict[str, Any] = {
            **base,
            "choices": [{"index": index, "delta": {"role": message.get("role") or "assistant", "content": ""}}],
        }
        if position == 0 and response.get("prompt_token_ids") is not None:
            first["prompt_token_ids"] = response["prompt_token_ids"]
        events.append(_event(first))
        delta: dict[str, Any] = {}
        if message.get("content"):
            delta["content"] = message["content"]
        if message.get("refusal"):
            delta["refusal"] = message["refusal"]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        body: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": choice.get("finish_reason")}
        if choice.get("logprobs") is not None:
            body["logprobs"] = choice["logprobs"]
        if choice.get("token_ids") is not None:
            body["token_ids"] = choice["token_ids"]
        events.append(_event({**base, "choices": [body]}))
    if include_usage and response.get("usage") is not None:
        events.append(_event({**base, "choices": [], "usage": response["usage"]}))
    return events


def _completion_events(response: dict[str, Any], include_usage: bool) -> list[bytes]:
    base = {
        "id": response.get("id"),
        "object": "text_completion",
        "created": response.get("created"),
        "model": response.get("model"),
    }
    events = [_event({**base, "choices": [choice]}) for choice in response.get("choices") or []]
    if include_usage and response.get("usage") is not None:
        events.append(_event({**base, "choices": [], "usage": response["usage"]}))
    return events


def response_to_sse_events(kind: CallKind, response: dict[str, Any], *, include_usage: bool) -> list[bytes]:
    """A complete response as the SSE events a streaming backend would have sent, ending with `[DONE]`.

    Token ids stay where vLLM streams them (`prompt_token_ids` on the first chunk, `token_ids` per choice),
    so a client-side accumulator rebuilds the same response.
    """
    events = _chat_events(response, include_usage) if kind == "chat" else _completion_events(response, include_usage)
    events.append(DONE_EVENT)
    return events
