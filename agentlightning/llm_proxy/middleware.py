"""Middlewares: request-level behaviour of the proxy (attribution to a rollout, stream handling, debugging).

Aliases accepted by `LLMProxy(middlewares=[...])`: `rollout_attempt` (default), `stream_conversion`,
`message_inspection`. Unlike the reference, streams are passed through as real SSE by default;
`stream_conversion` is for backends that cannot stream token ids.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional, Union

from .call import ProxyCall
from .callbacks import resolve_plugins

if TYPE_CHECKING:
    from .runtime import ProxyRuntime

__all__ = [
    "ProxyMiddleware",
    "RolloutAttemptMiddleware",
    "StreamConversionMiddleware",
    "MessageInspectionMiddleware",
    "MIDDLEWARE_ALIASES",
    "DEFAULT_MIDDLEWARES",
    "ROLLOUT_ID_HEADER",
    "ATTEMPT_ID_HEADER",
    "resolve_middlewares",
]

logger = logging.getLogger(__name__)

ROLLOUT_ID_HEADER = "x-rollout-id"
ATTEMPT_ID_HEADER = "x-attempt-id"


class ProxyMiddleware:
    """Base class: `on_request` runs when a request arrives, `on_response` once the call has finished."""

    def on_request(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        """Inspect or adjust the call before callbacks run and the request is forwarded."""

    def on_response(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        """Inspect the finished call (before callbacks record it)."""


class RolloutAttemptMiddleware(ProxyMiddleware):
    """Attribute the call to a rollout attempt and reserve its span sequence id in the store.

    Ids come from the route `/rollout/{rid}/attempt/{aid}/v1/...`, or else from the headers `x-rollout-id`
    and `x-attempt-id`. The sequence id is requested as the request arrives, concurrently with the backend
    call, so it orders the call before anything the agent records after receiving the response.
    """

    def on_request(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        rollout_id = call.path_rollout_id or call.headers.get(ROLLOUT_ID_HEADER)
        attempt_id = call.path_attempt_id or call.headers.get(ATTEMPT_ID_HEADER)
        if bool(rollout_id) != bool(attempt_id):
            logger.warning(
                "request names rollout %r but attempt %r; both are needed to record the call", rollout_id, attempt_id
            )
            return
        call.rollout_id, call.attempt_id = rollout_id or None, attempt_id or None
        if call.is_attributed:
            runtime.reserve_sequence_id(call)


class StreamConversionMiddleware(ProxyMiddleware):
    """Serve `stream: true` requests with a non-streaming backend call, re-emitted to the client as SSE.

    For backends that return token ids only in complete responses. The client still gets a valid stream
    (role chunk, content/tool-call chunk with token ids, finish, optional usage, `[DONE]`), but only once
    the whole answer is generated.
    """

    def on_request(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        if call.client_stream:
            call.convert_stream = True


class MessageInspectionMiddleware(ProxyMiddleware):
    """Log each call's messages and response at INFO level (debugging aid; verbose)."""

    def __init__(self, max_chars: int = 4000) -> None:
        self.max_chars = max_chars

    def _clip(self, value: object) -> str:
        text = json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= self.max_chars else text[: self.max_chars] + "..."

    def on_request(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        messages = call.client_body.get("messages", call.client_body.get("prompt"))
        logger.info(
            "LLM call to %r (rollout %r, attempt %r): %s",
            call.model,
            call.rollout_id,
            call.attempt_id,
            self._clip(messages),
        )

    def on_response(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        if call.error is not None:
            logger.info("LLM call to %r failed (HTTP %s): %s", call.model, call.status_code, call.error)
        else:
            logger.info("LLM call to %r answered: %s", call.model, self._clip((call.response or {}).get("choices")))


MIDDLEWARE_ALIASES: dict[str, type[ProxyMiddleware]] = {
    "rollout_attempt": RolloutAttemptMiddleware,
    "stream_conversion": StreamConversionMiddleware,
    "message_inspection": MessageInspectionMiddleware,
}
DEFAULT_MIDDLEWARES: tuple[str, ...] = ("rollout_attempt",)

MiddlewareSpec = Union[str, ProxyMiddleware]


def resolve_middlewares(specs: Optional[Sequence[MiddlewareSpec]]) -> list[ProxyMiddleware]:
    """Instances for aliases / instances (None = the defaults); unknown aliases name the known ones."""
    return resolve_plugins(specs, DEFAULT_MIDDLEWARES, MIDDLEWARE_ALIASES, ProxyMiddleware, "middleware")
