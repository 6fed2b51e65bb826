"""The policy server's other APIs: OpenAI Responses (`/v1/responses`) and Anthropic Messages (`/v1/messages`).

An agent on the OpenAI Agents SDK's default model (Responses API) or on an Anthropic client trains with
GRPO directly against `agl serve` / GRPO's policy server, no proxy in between. Each request is translated
to a chat completion (`utils/responses_format.py`, `utils/messages_format.py`), generated like one
(`completions.py`: same engine, same tool-call convention, same pause gate), and translated back with
vLLM-style token ids (`prompt_token_ids`, `token_ids` on the Response / Message) and, when asked for or
when the server always returns them, the sampled tokens' logprobs: in each `output_text` part's
`logprobs` (Responses: `include: ["message.output_text.logprobs"]` or `logprobs: true`), and as
`logprobs.content` on the Message (Messages: `logprobs: true`, an extension like the token ids).
A streamed request (`stream: true`) gets the whole event sequence once the answer is complete.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from pydantic import ValidationError

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
    sse_encode,
)

from .adapters import UnknownAdapterError
from .completions import ClientGone, GatedPolicy, complete_chat, submit_chat, unless_disconnected
from .protocol import ChatCompletionRequest, openai_error

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from starlette.responses import Response

__all__ = ["add_api_routes", "RESPONSES_API", "MESSAGES_API", "ChatDialect"]

logger = logging.getLogger(__name__)

RESPONSES_LOGPROBS = "message.output_text.logprobs"


@dataclass(frozen=True)
class ChatDialect:
    """How one API maps onto a chat completion and back."""

    name: str
    to_chat: Callable[[Mapping[str, Any]], Dict[str, Any]]
    from_chat: Callable[[Mapping[str, Any], Mapping[str, Any]], Dict[str, Any]]
    stream_events: Callable[[Mapping[str, Any], Mapping[str, Any]], list[Dict[str, Any]]]
    error: Callable[[str, str], Dict[str, Any]]


def _responses_to_chat(body: Mapping[str, Any]) -> Dict[str, Any]:
    chat = responses_request_to_chat(body, strict=True)
    if RESPONSES_LOGPROBS in [str(item) for item in body.get("include") or []]:
        chat["logprobs"] = True
    return chat


def _messages_error(message: str, error_type: str) -> Dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _openai_error(message: str, error_type: str) -> Dict[str, Any]:
    return openai_error(message, error_type=error_type)


RESPONSES_API = ChatDialect(
    name="responses",
    to_chat=_responses_to_chat,
    from_chat=lambda chat, request: chat_response_to_responses(chat, request),
    stream_events=lambda chat, request: ChatToResponsesStream(request).finish(chat),
    error=_openai_error,
)
MESSAGES_API = ChatDialect(
    name="messages",
    to_chat=lambda body: messages_request_to_chat(body, strict=True),
    from_chat=lambda chat, request: chat_response_to_messages(chat, request),
    stream_events=lambda chat, request: ChatToMessagesStream(request).finish(chat),
    error=_messages_error,
)


def _events(events: list[Dict[str, Any]]) -> Iterator[bytes]:
    for event in events:
        yield sse_encode(event)


async def _answer(server: GatedPolicy, dialect: ChatDialect, request: Request) -> Response:
    from starlette.responses import JSONResponse, StreamingResponse

    def failure(status_code: int, message: str, error_type: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse(status_code=status_code, content=dialect.error(message, error_type))

    try:
        body = json.loads(await request.body())
    except ValueError as exc:
        return failure(400, f"the request body is not JSON ({exc})")
    if not isinstance(body, dict):
        return failure(400, f"the request body must be a JSON object, got {type(body).__name__}")
    try:
        chat = dialect.to_chat(body)  # type: ignore[arg-type]
        chat["stream"] = False
        chat_request = ChatCompletionRequest.model_validate(chat)
    except (ResponsesTranslationError, MessagesTranslationError) as exc:
        return failure(400, str(exc))
    except ValidationError as exc:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return failure(400, f"invalid request: {details}")
    gate = server.gate
    if not await server._enter():  # type: ignore[reportPrivateUsage]
        content = dialect.error(server.paused_message(), "rate_limit_error")
        return JSONResponse(status_code=429, content=content, headers={"Retry-After": gate.retry_after_header()})
    try:
        try:
            stream = submit_chat(server, chat_request)
        except UnknownAdapterError as exc:
            return failure(404, str(exc), "not_found_error")
        except ValueError as exc:
            return failure(400, str(exc))
        completion = await unless_disconnected(request, stream, complete_chat(server, chat_request, stream))
    except ClientGone as exc:
        logger.info("%s request cancelled: %s", dialect.name, exc)
        return failure(499, str(exc))
    except Exception as exc:
        logger.exception("%s request failed", dialect.name)
        return failure(500, str(exc), "api_error")
    finally:
        gate.exit()
    if body.get("stream"):
        events = dialect.stream_events(completion, body)  # type: ignore[arg-type]
        return StreamingResponse(_events(events), media_type="text/event-stream")
    return JSONResponse(content=dialect.from_chat(completion, body))  # type: ignore[arg-type]


def add_api_routes(app: FastAPI, server: GatedPolicy, dialects: Optional[list[ChatDialect]] = None) -> None:
    """Serve `POST /v1/responses` and `POST /v1/messages` on the policy server's app."""

    def route(dialect: ChatDialect) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            return await _answer(server, dialect, request)

        return handle

    for dialect in dialects or [RESPONSES_API, MESSAGES_API]:
        app.add_route(f"/v1/{dialect.name}", route(dialect), methods=["POST"])
