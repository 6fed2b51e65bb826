"""`agl serve`'s other APIs: OpenAI Responses (`/v1/responses`) and Anthropic Messages (`/v1/messages`).

An agent on the OpenAI Agents SDK's default model (Responses API) or on an Anthropic client trains with
GRPO directly against `agl serve` / GRPO's policy server, no proxy in between. Each request is translated
to a chat completion (`utils/responses_format.py`, `utils/messages_format.py`), generated like one
(`OpenAIServer.complete`: on the policy server the same engine, tool-call convention and pause gate; on
the echo server the same echo), and translated back with
vLLM-style token ids (`prompt_token_ids`, `token_ids` on the Response / Message) and, when asked for or
when the server always returns them, the sampled tokens' logprobs: in each `output_text` part's
`logprobs` (Responses: `include: ["message.output_text.logprobs"]` or `logprobs: true`), and as
`logprobs.content` on the Message (Messages: `logprobs: true`, an extension like the token ids).
A streamed request (`stream: true`) gets the whole event sequence once the answer is complete. A body of
the wrong shape (`include: true`, a numeric `content`) is a 400 naming the field, never a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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

from ..web.hardening import describe_validation_errors, parse_json_object
from .adapters import UnknownAdapterError
from .completions import ClientGone
from .protocol import ChatCompletionRequest, openai_error

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from starlette.responses import Response

    from ..web.pause import PauseGate

__all__ = ["add_api_routes", "ChatBackend", "RESPONSES_API", "MESSAGES_API", "ChatDialect", "ResponsesRequest"]

logger = logging.getLogger(__name__)

RESPONSES_LOGPROBS = "message.output_text.logprobs"


class ChatBackend(Protocol):
    """What answering these APIs needs of a server (`shell.OpenAIServer` is one)."""

    @property
    def gate(self) -> PauseGate: ...

    async def admit(self) -> bool: ...

    def paused_message(self) -> str: ...

    async def complete(self, body: ChatCompletionRequest, request: Request) -> Dict[str, Any]: ...


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentPart(_Open):
    type: Optional[str] = None
    text: Optional[str] = None
    refusal: Optional[str] = None
    image_url: Optional[Union[str, Dict[str, Any]]] = None


Content = Optional[Union[str, List[Union[str, ContentPart]]]]


class InputItem(_Open):
    """A message, a `function_call` or a `function_call_output` of a Responses `input` list."""

    type: Optional[str] = None
    role: Optional[str] = None
    content: Content = None
    id: Optional[str] = None
    call_id: Optional[str] = None
    name: Optional[str] = None
    arguments: Optional[str] = None
    output: Content = None


class ResponsesRequest(_Open):
    """The shape of the `POST /v1/responses` fields the server reads: a wrong type is a 400 naming the field."""

    model: Optional[str] = None
    input: Union[str, List[InputItem]]
    instructions: Optional[str] = None
    include: Optional[List[str]] = None
    max_output_tokens: Optional[int] = Field(default=None, ge=1)
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Optional[Union[str, Dict[str, Any]]] = None
    parallel_tool_calls: Optional[bool] = None
    text: Optional[Dict[str, Any]] = None
    stream: Optional[bool] = None
    previous_response_id: Optional[str] = None


@dataclass(frozen=True)
class ChatDialect:
    """How one API maps onto a chat completion and back (`request`: the model its body must fit, if any)."""

    name: str
    to_chat: Callable[[Mapping[str, Any]], Dict[str, Any]]
    from_chat: Callable[[Mapping[str, Any], Mapping[str, Any]], Dict[str, Any]]
    stream_events: Callable[[Mapping[str, Any], Mapping[str, Any]], list[Dict[str, Any]]]
    error: Callable[[str, str], Dict[str, Any]]
    request: Optional[type[BaseModel]] = None


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
    request=ResponsesRequest,
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


def _chat_request(dialect: ChatDialect, body: Dict[str, Any]) -> ChatCompletionRequest:
    """The chat completion `body` asks for (ValueError naming the bad field otherwise)."""
    try:
        if dialect.request is not None:
            dialect.request.model_validate(body)
        chat = dialect.to_chat(body)
        chat["stream"] = False
        return ChatCompletionRequest.model_validate(chat)
    except (ResponsesTranslationError, MessagesTranslationError) as exc:
        raise ValueError(str(exc)) from None
    except ValidationError as exc:
        raise ValueError(f"invalid request: {describe_validation_errors(exc.errors())}") from None


async def _answer(server: ChatBackend, dialect: ChatDialect, request: Request) -> Response:
    from starlette.responses import JSONResponse, StreamingResponse

    def failure(status_code: int, message: str, error_type: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse(status_code=status_code, content=dialect.error(message, error_type))

    try:
        body = parse_json_object(await request.body())
        chat_request = _chat_request(dialect, body)
    except ValueError as exc:
        return failure(400, str(exc))
    gate = server.gate
    if not await server.admit():
        content = dialect.error(server.paused_message(), "rate_limit_error")
        return JSONResponse(status_code=429, content=content, headers={"Retry-After": gate.retry_after_header()})
    try:
        completion = await server.complete(chat_request, request)
    except UnknownAdapterError as exc:
        return failure(404, str(exc), "not_found_error")
    except ValueError as exc:
        return failure(400, str(exc))
    except ClientGone as exc:
        logger.info("%s request cancelled: %s", dialect.name, exc)
        return failure(499, str(exc))
    except Exception as exc:
        logger.exception("%s request failed", dialect.name)
        return failure(500, str(exc), "api_error")
    finally:
        gate.exit()
    if body.get("stream"):
        events = dialect.stream_events(completion, body)
        return StreamingResponse(_events(events), media_type="text/event-stream")
    return JSONResponse(content=dialect.from_chat(completion, body))


def add_api_routes(app: FastAPI, server: ChatBackend, dialects: Optional[list[ChatDialect]] = None) -> None:
    """Serve `POST /v1/responses` and `POST /v1/messages` on the app of `server` (echo or policy)."""

    def route(dialect: ChatDialect) -> Callable[[Request], Any]:
        async def handle(request: Request) -> Response:
            return await _answer(server, dialect, request)

        return handle

    for dialect in dialects or [RESPONSES_API, MESSAGES_API]:
        app.add_route(f"/v1/{dialect.name}", route(dialect), methods=["POST"])
