"""`ProxyCall`: everything the proxy knows about one forwarded LLM request, from arrival to its span."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from .models import Deployment

__all__ = ["CallKind", "ClientApi", "ProxyCall", "ENDPOINT_OF_KIND"]

CallKind = Literal["chat", "completion"]
ClientApi = Literal["chat", "completion", "responses", "messages"]

ENDPOINT_OF_KIND: dict[str, str] = {"chat": "chat/completions", "completion": "completions"}
"""OpenAI route (relative to `/v1`) of each call kind."""


@dataclass
class ProxyCall:
    """One request through the proxy; middlewares and callbacks read and adjust it.

        `body` is the request as it will be sent to the backend (callbacks may add fields such as
        `return_token_ids`); `client_body` is what the client sent. `response` is the complete response
        (rebuilt from the chunks when streamed), `error` a message when the call failed. For a translated call
    `client_body` is the Responses / Messages request and `body` its chat-completions equivalent; `response`
    is always the backend's chat-completions response.
    """

    kind: CallKind
    """What the backend is asked for: a chat completion or a legacy completion."""
    client_body: dict[str, Any]
    body: dict[str, Any]
    headers: Mapping[str, str]
    start_time: float
    rollout_id: Optional[str] = None
    attempt_id: Optional[str] = None
    path_rollout_id: Optional[str] = None
    path_attempt_id: Optional[str] = None
    client_stream: bool = False
    convert_stream: bool = False
    sequence_id_task: Optional[asyncio.Future[int]] = None
    deployment: Optional[Deployment] = None
    n_attempts: int = 0
    status_code: Optional[int] = None
    response: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    timed_out: bool = False
    """The backend did not answer in time (after the retries): the span is marked a `llm_call` timeout."""
    end_time: Optional[float] = None
    trace_id: Optional[str] = None
    parent_span_id: Optional[str] = None
    extra_attributes: dict[str, Any] = field(default_factory=dict)
    client_api: ClientApi = "chat"
    """The API the client spoke: `chat`, `completion`, or `responses` / `messages` (served through a chat
    completion, see `translation`); defaults to `kind`."""

    def __post_init__(self) -> None:
        if self.client_api == "chat" and self.kind == "completion":
            self.client_api = "completion"

    @property
    def model(self) -> str:
        """The model name the client asked for."""
        return str(self.client_body.get("model"))

    @property
    def backend_stream(self) -> bool:
        """Whether the backend is asked to stream (the client asked and no conversion applies)."""
        return self.client_stream and not self.convert_stream

    @property
    def translated(self) -> bool:
        """Whether the client's API differs from the backend call (Responses / Messages over chat)."""
        return self.client_api != self.kind

    @property
    def is_attributed(self) -> bool:
        """Whether the call belongs to a rollout attempt (and is therefore recorded)."""
        return bool(self.rollout_id) and bool(self.attempt_id)
