"""Serving `/v1/responses` and `/v1/messages` from a chat-completions backend.

A client speaking the OpenAI Responses API (the OpenAI Agents SDK) or the Anthropic Messages API (a
Claude-Code-style agent) is answered in its own format while the backend (vLLM, our policy server, any
LiteLLM provider) is called with the equivalent chat completion, token ids included. The formats
themselves live in `agentlightning.formats.responses` / `messages_format`; this module adds what
the proxy needs around them: errors in the client's format and stream translators producing SSE bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

from starlette.responses import JSONResponse, Response

from agentlightning.formats.messages import (
    ChatToMessagesStream,
    MessagesTranslationError,
    chat_response_to_messages,
    messages_request_to_chat,
)
from agentlightning.formats.responses import (
    ChatToResponsesStream,
    ResponsesTranslationError,
    chat_response_to_responses,
    responses_request_to_chat,
)

from .call import ClientApi, ProxyCall

__all__ = [
    "ClientApi",
    "TRANSLATED_APIS",
    "TranslationError",
    "request_to_chat",
    "chat_response_to_client",
    "client_error_response",
    "StreamTranslator",
    "SSE_HEADERS",
    "translated_answer",
]

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
"""Headers of every server-sent-events answer of the proxy (no caching, no proxy buffering)."""

TRANSLATED_APIS: frozenset[str] = frozenset({"responses", "messages"})
"""Client APIs served through a chat-completions backend call."""

TranslationError = (ResponsesTranslationError, MessagesTranslationError)

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def request_to_chat(client_api: ClientApi, body: Mapping[str, Any]) -> dict[str, Any]:
    """The chat-completions request for a translated client request; raises a `TranslationError` member."""
    if client_api == "responses":
        return responses_request_to_chat(body)
    if client_api == "messages":
        return messages_request_to_chat(body)
    raise ValueError(f"{client_api!r} requests are forwarded as they are, not translated")


def chat_response_to_client(
    client_api: ClientApi, chat: Mapping[str, Any], request: Mapping[str, Any]
) -> dict[str, Any]:
    if client_api == "responses":
        return chat_response_to_responses(chat, request)
    return chat_response_to_messages(chat, request)


def client_error_response(
    client_api: ClientApi, status_code: int, message: str, *, error_type: str, param: Optional[str] = None
) -> JSONResponse:
    """An error body the client's SDK understands: Anthropic's shape for `/messages`, OpenAI's otherwise."""
    if client_api == "messages":
        kind = _ANTHROPIC_ERROR_TYPES.get(status_code, "api_error")
        return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status_code)
    return JSONResponse(
        {"error": {"message": message, "type": error_type, "param": param, "code": status_code}},
        status_code=status_code,
    )


def _sse(event: Mapping[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


class StreamTranslator:
    """Chat-completion chunks in, the client's stream events (SSE bytes) out, as they arrive."""

    def __init__(self, client_api: ClientApi, request: Mapping[str, Any]) -> None:
        self._stream: Any = (
            ChatToResponsesStream(request) if client_api == "responses" else ChatToMessagesStream(request)
        )

    def add_chunk(self, chunk: Mapping[str, Any]) -> bytes:
        return b"".join(_sse(event) for event in self._stream.add_chunk(chunk))

    def finish(self, chat_response: Mapping[str, Any]) -> bytes:
        """The closing events, built from the complete (accumulated) chat response."""
        return b"".join(_sse(event) for event in self._stream.finish(chat_response))

    def error(self, message: str) -> bytes:
        """An in-stream error event after the stream has started."""
        if isinstance(self._stream, ChatToMessagesStream):
            return _sse({"type": "error", "error": {"type": "api_error", "message": message}})
        return _sse({"type": "error", "code": "upstream_error", "message": message, "param": None})


def translated_answer(call: ProxyCall) -> Response:
    """The finished call's answer in the client's format (Responses / Messages), streamed if asked."""
    api = call.client_api
    if call.error is not None or call.response is None:
        status = call.status_code if call.status_code is not None and call.status_code >= 400 else 502
        return client_error_response(
            api, status, call.error or "the backend gave no answer", error_type="upstream_error"
        )
    if call.client_stream:
        events = StreamTranslator(api, call.client_body).finish(call.response)
        return Response(events, media_type="text/event-stream", headers=SSE_HEADERS)
    return JSONResponse(chat_response_to_client(api, call.response, call.client_body))
