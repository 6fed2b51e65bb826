"""Zero-code-change instrumentation of the `anthropic` client's Messages API.

`instrument_anthropic()` patches `Messages.create` / `AsyncMessages.create` (plain and `stream=True`) and
`Messages.stream` / `AsyncMessages.stream` so every call becomes one `anthropic.messages` span carrying the
same `gen_ai.*` attributes as a chat completion (system and messages as `gen_ai.prompt.*`, text and
`tool_use` blocks as `gen_ai.completion.0.*`, usage), plus token ids when the backend returns them (our
LLM proxy's `/v1/messages` does). Needs the `anthropic` extra.

Recent Anthropic SDKs open an OpenTelemetry span of their own per call (`anthropic.messages.create`, no
content). While our span is open that one is suppressed, so a call is one span, like OpenAI calls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Callable

from opentelemetry import context as otel_context

from agentlightning.types import Attributes
from agentlightning.utils.messages_format import (
    MessagesStreamAccumulator,
    messages_request_to_chat,
    messages_response_to_chat,
)

from .llm_calls import CallFormat, materialize_iterables, wrap_async_call, wrap_sync_call
from .openai import request_to_attributes, response_to_attributes

__all__ = [
    "ANTHROPIC_SPAN_NAME",
    "MESSAGES_FORMAT",
    "instrument_anthropic",
    "uninstrument_anthropic",
    "is_anthropic_instrumented",
]

logger = logging.getLogger(__name__)

ANTHROPIC_SPAN_NAME = "anthropic.messages"
_MARK = "__agentlightning_anthropic_original__"


def _request_attributes(request: Mapping[str, Any]) -> Attributes:
    attributes = request_to_attributes(messages_request_to_chat(request, strict=False), system="anthropic")
    attributes["gen_ai.request.type"] = "messages"
    return attributes


def _response_attributes(response: Mapping[str, Any]) -> Attributes:
    attributes = response_to_attributes(messages_response_to_chat(response))
    if response.get("stop_reason") is not None:
        attributes["gen_ai.response.stop_reason"] = str(response["stop_reason"])
    return attributes


MESSAGES_FORMAT = CallFormat(
    ANTHROPIC_SPAN_NAME,
    _request_attributes,
    _response_attributes,
    MessagesStreamAccumulator,
    lambda result: hasattr(result, "content") and hasattr(result, "stop_reason"),
)

_lock = threading.Lock()
_enabled = False
_installed: list[tuple[type, str]] = []
_SUPPRESS_KEY = otel_context._SUPPRESS_INSTRUMENTATION_KEY  # type: ignore[attr-defined]


def _quiet_sdk_tracer(original: Any) -> property:
    """The SDK client's `_tracer` property, None (no SDK span) while our wrapper suppresses inner spans."""

    def tracer(self: Any) -> Any:
        if _enabled and otel_context.get_value(_SUPPRESS_KEY):
            return None
        return original.fget(self)

    quiet = _MarkedProperty(tracer)
    setattr(quiet, _MARK, original)
    return quiet


class _MarkedProperty(property):
    """A property that can carry the mark pointing at the one it replaced."""


def _is_enabled() -> bool:
    return _enabled


def _wrap_stream_sync(original: Callable[..., Any]) -> Callable[..., Any]:
    """`Messages.stream()` returns a manager that posts on enter: trace that request, not the manager."""

    def stream(self: Any, *args: Any, **kwargs: Any) -> Any:
        materialize_iterables(kwargs)
        manager = original(self, *args, **kwargs)
        if not _enabled:
            return manager
        api_request = manager._MessageStreamManager__api_request

        def post(**_: Any) -> Any:
            return api_request()

        traced = wrap_sync_call(post, MESSAGES_FORMAT, _is_enabled)
        manager._MessageStreamManager__api_request = lambda: traced(**kwargs)
        return manager

    setattr(stream, _MARK, original)
    return stream


def _wrap_stream_async(original: Callable[..., Any]) -> Callable[..., Any]:
    def stream(self: Any, *args: Any, **kwargs: Any) -> Any:
        materialize_iterables(kwargs)
        manager = original(self, *args, **kwargs)
        if not _enabled:
            return manager
        api_request = manager._AsyncMessageStreamManager__api_request

        async def post(**_: Any) -> Any:
            return await api_request

        manager._AsyncMessageStreamManager__api_request = wrap_async_call(post, MESSAGES_FORMAT, _is_enabled)(**kwargs)
        return manager

    setattr(stream, _MARK, original)
    return stream


def _wrap_create(original: Callable[..., Any], asynchronous: bool) -> Callable[..., Any]:
    wrapper = (wrap_async_call if asynchronous else wrap_sync_call)(original, MESSAGES_FORMAT, _is_enabled)
    setattr(wrapper, _MARK, original)
    return wrapper


def instrument_anthropic() -> bool:
    """Patch the Anthropic Messages client (idempotent); False when `anthropic` is not installed."""
    global _enabled
    try:
        from anthropic.resources.messages import AsyncMessages, Messages
    except ImportError:
        logger.debug("anthropic is not installed; its Messages API is not auto-instrumented")
        return False
    targets: list[tuple[type, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = [
        (Messages, "create", lambda f: _wrap_create(f, False)),
        (AsyncMessages, "create", lambda f: _wrap_create(f, True)),
        (Messages, "stream", _wrap_stream_sync),
        (AsyncMessages, "stream", _wrap_stream_async),
    ]
    try:  # SDKs with their own OpenTelemetry spans
        from anthropic._base_client import BaseClient

        if isinstance(BaseClient.__dict__.get("_tracer"), property):
            targets.append((BaseClient, "_tracer", _quiet_sdk_tracer))  # type: ignore[arg-type]
    except ImportError:
        pass
    with _lock:
        for cls, name, wrap in targets:
            current = cls.__dict__.get(name)
            if current is None or hasattr(current, _MARK):
                continue
            setattr(cls, name, wrap(current))
            _installed.append((cls, name))
        _enabled = True
    return True


def uninstrument_anthropic() -> None:
    """Undo `instrument_anthropic()`."""
    global _enabled
    with _lock:
        _enabled = False
        for cls, name in _installed:
            current = cls.__dict__.get(name)
            original = getattr(current, _MARK, None)
            if original is not None:
                setattr(cls, name, original)
        _installed.clear()


def is_anthropic_instrumented() -> bool:
    return _enabled
