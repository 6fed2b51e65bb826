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

import inspect
import logging
import threading
from collections.abc import Mapping
from typing import Any, Callable

from opentelemetry import context as otel_context

from agentlightning.formats.messages import (
    MessagesStreamAccumulator,
    messages_request_to_chat,
    messages_response_to_chat,
)
from agentlightning.types import Attributes

from .llm_calls import CallFormat, client_capture_off, materialize_iterables, wrap_async_call, wrap_sync_call
from .openai_chat import request_to_attributes, response_to_attributes
from .openai_clients import install_safe_client_finalizers

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
_installed: set[tuple[type, str]] = set()
# Our wrappers by identity: attribute checks are not enough, as wrapt wrappers (AgentOps) proxy attributes.
_ours: dict[int, Any] = {}
_SUPPRESS_KEY = otel_context._SUPPRESS_INSTRUMENTATION_KEY  # type: ignore[attr-defined]


def _quiet_sdk_tracer(original: Any) -> property:
    """The SDK client's `_tracer` property, None (no SDK span) while our wrapper suppresses inner spans."""

    def tracer(self: Any) -> Any:
        if (_enabled and otel_context.get_value(_SUPPRESS_KEY)) or client_capture_off():
            return None
        return original.fget(self)

    quiet = _MarkedProperty(tracer)
    setattr(quiet, _MARK, original)
    return quiet


class _MarkedProperty(property):
    """A property that can carry the mark pointing at the one it replaced."""


def _is_enabled() -> bool:
    return _enabled


def _trace_stream_manager(manager: Any, kwargs: dict[str, Any], asynchronous: bool) -> bool:
    """Make the manager's request (sent on enter) one traced call; False if it is not the SDK's manager."""
    attribute = f"_{'Async' if asynchronous else ''}MessageStreamManager__api_request"
    if not hasattr(manager, attribute):
        return False
    api_request = getattr(manager, attribute)
    if asynchronous:

        async def post_async(**_: Any) -> Any:
            return await api_request

        setattr(manager, attribute, wrap_async_call(post_async, MESSAGES_FORMAT, _is_enabled)(**kwargs))
    else:

        def post(**_: Any) -> Any:
            return api_request()

        traced = wrap_sync_call(post, MESSAGES_FORMAT, _is_enabled)
        setattr(manager, attribute, lambda: traced(**kwargs))
    return True


def _wrap_stream(original: Callable[..., Any], asynchronous: bool) -> Callable[..., Any]:
    """`Messages.stream()` returns a manager that posts on enter: trace that request, not the manager.

    The SDK's own `stream` is called, below any other library's wrapper (AgentOps wraps it with a manager
    of its own): our span stands for the call, as for `create`, where inner instrumentations are suppressed.
    """
    innermost = inspect.unwrap(original)

    def stream(self: Any, *args: Any, **kwargs: Any) -> Any:
        if client_capture_off():
            return innermost(self, *args, **kwargs)  # the SDK's own, past any other library's wrapper
        if not _enabled:
            return original(self, *args, **kwargs)
        materialize_iterables(kwargs)
        manager = innermost(self, *args, **kwargs)
        try:
            if not _trace_stream_manager(manager, kwargs, asynchronous):
                logger.debug("unknown Anthropic stream manager %s; the call is not traced", type(manager).__name__)
        except Exception:
            logger.exception("could not trace an Anthropic messages.stream() call")
        return manager

    setattr(stream, _MARK, original)
    stream.__wrapped__ = original  # type: ignore[attr-defined]  # so a later copy of ours unwraps past this one
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
        (Messages, "stream", lambda f: _wrap_stream(f, False)),
        (AsyncMessages, "stream", lambda f: _wrap_stream(f, True)),
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
            if current is None or id(current) in _ours:
                continue
            # Not ours on top (first install, or another library wrapped ours since): wrap on top again, so
            # our span is the outer one; a copy of ours below sees the suppression and passes through.
            wrapper = wrap(current)
            _ours[id(wrapper)] = wrapper
            setattr(cls, name, wrapper)
            _installed.add((cls, name))
        _enabled = True
    # The SDK's async client shares openai's unsafe finalizer (see `openai_clients`).
    install_safe_client_finalizers()
    return True


def uninstrument_anthropic() -> None:
    """Undo `instrument_anthropic()`."""
    global _enabled
    with _lock:
        _enabled = False
        for cls, name in _installed:
            current = cls.__dict__.get(name)
            while current is not None and id(current) in _ours:
                current = getattr(current, _MARK)
                setattr(cls, name, current)
        _installed.clear()


def is_anthropic_instrumented() -> bool:
    return _enabled
