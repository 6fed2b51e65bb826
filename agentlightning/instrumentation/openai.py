"""Zero-code-change instrumentation of the `openai` client: chat completions and the Responses API.

`instrument_openai()` patches `create` and `parse` of `Completions` and `AsyncCompletions` (and of the
`beta.chat.completions` classes of older clients) so every chat completion (sync, async, streamed,
structured output via `parse` / `stream`, or through `with_raw_response`) becomes one `openai.chat.completion`
span with `gen_ai.*` request/response attributes, usage, and the token ids / logprobs a vLLM-style server
returns. `parse` needs its own wrapper: it posts the request itself instead of going through `create`, so
structured-output calls (e.g. LangChain's `with_structured_output`) would otherwise leave no span.

How a chat completion becomes attributes is `openai_chat`'s (`request_to_attributes`,
`response_to_attributes`, `ChatCompletionAccumulator`, re-exported here); `Responses` / `AsyncResponses`
(`create`, `parse`, and `stream()` through `create`) are patched the same way with the call format of
`openai_responses`: one `openai.responses` span per call. The span machinery (`CallFormat`,
`wrap_sync_call` / `wrap_async_call`) lives in `llm_calls`, shared with the Anthropic and LiteLLM
instrumentations.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from .llm_calls import WRAPPED_MARK, CallFormat, wrap_async_call, wrap_sync_call
from .openai_chat import (
    CHAT_FORMAT,
    LLM_SPAN_NAME,
    ChatCompletionAccumulator,
    request_to_attributes,
    response_to_attributes,
    stream_index,
)

__all__ = [
    "LLM_SPAN_NAME",
    "instrument_openai",
    "uninstrument_openai",
    "is_openai_instrumented",
    "is_openai_wrapper",
    "request_to_attributes",
    "response_to_attributes",
    "stream_index",
    "ChatCompletionAccumulator",
    "CHAT_FORMAT",
]

logger = logging.getLogger(__name__)


# ---- install / uninstall ----


class _InstrumentationState:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.enabled = False
        self.installed: set[tuple[type, str]] = set()
        # Identity of every wrapper we created. Attribute checks are not enough: wrapt's FunctionWrapper
        # (used by AgentOps and OpenTelemetry instrumentations) proxies attribute access to what it wraps.
        self.wrapper_ids: set[int] = set()
        self.wrappers: list[Callable[..., Any]] = []


_state = _InstrumentationState()


# Methods that send a request; `parse` posts on its own (it does not call `create`). The Responses
# `stream()` helper goes through `create`, so it is covered.
_METHODS = ("create", "parse")

Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


def _is_enabled() -> bool:
    return _state.enabled


def _wrappers(call_format: CallFormat) -> tuple[Wrap, Wrap]:
    def sync(original: Callable[..., Any]) -> Callable[..., Any]:
        return wrap_sync_call(original, call_format, _is_enabled)

    def async_(original: Callable[..., Any]) -> Callable[..., Any]:
        return wrap_async_call(original, call_format, _is_enabled)

    return sync, async_


def _targets() -> list[tuple[type, str, Wrap]]:
    """(class, method, wrapper factory) for every client method that sends a chat completion or a response."""
    from openai.resources.chat.completions import AsyncCompletions, Completions

    chat_sync, chat_async = _wrappers(CHAT_FORMAT)
    classes: list[tuple[type, Wrap]] = [(Completions, chat_sync), (AsyncCompletions, chat_async)]
    try:  # openai < 2 keeps structured outputs in separate `beta.chat.completions` classes
        from openai.resources.beta.chat.completions import (  # type: ignore[import-not-found]
            AsyncCompletions as BetaAsyncCompletions,  # type: ignore[reportUnknownVariableType]
        )
        from openai.resources.beta.chat.completions import (  # type: ignore[import-not-found]
            Completions as BetaCompletions,  # type: ignore[reportUnknownVariableType]
        )
    except ImportError:
        pass
    else:
        classes += [(BetaCompletions, chat_sync), (BetaAsyncCompletions, chat_async)]  # type: ignore[list-item]
    try:  # the Responses API (openai >= 1.66)
        from openai.resources.responses import AsyncResponses, Responses
    except ImportError:
        pass
    else:
        from .openai_responses import RESPONSES_FORMAT

        responses_sync, responses_async = _wrappers(RESPONSES_FORMAT)
        classes += [(Responses, responses_sync), (AsyncResponses, responses_async)]
    return [(cls, name, wrap) for cls, wrap in classes for name in _METHODS if callable(cls.__dict__.get(name))]


def is_openai_wrapper(func: Any) -> bool:
    """Whether `func` (e.g. `Completions.__dict__["parse"]`) is a wrapper installed by `instrument_openai`."""
    return id(func) in _state.wrapper_ids


_is_ours = is_openai_wrapper


def instrument_openai() -> bool:
    """Patch the OpenAI chat-completions client (idempotent); False when `openai` is not installed.

    Our wrapper must be the outermost one: it suppresses inner instrumentations so a call makes one span.
    If another library wrapped `create` on top of ours since, we wrap again on top (the inner copy of
    ours then sees the suppression and passes through).
    """
    try:
        targets = _targets()
    except ImportError:
        logger.debug("openai is not installed; chat completions are not auto-instrumented")
        return False
    with _state.lock:
        for cls, name, wrap in targets:
            current = cls.__dict__[name]
            if not _is_ours(current):
                wrapper = wrap(current)
                _state.wrappers.append(wrapper)
                _state.wrapper_ids.add(id(wrapper))
                setattr(cls, name, wrapper)
            _state.installed.add((cls, name))
        _state.enabled = True
    return True


def uninstrument_openai() -> None:
    """Undo `instrument_openai()`; copies of our wrapper buried under other libraries' wrappers turn inert."""
    with _state.lock:
        _state.enabled = False
        for cls, name in list(_state.installed):
            current = cls.__dict__.get(name)
            while current is not None and _is_ours(current):
                current = getattr(current, WRAPPED_MARK)
                setattr(cls, name, current)
            _state.installed.discard((cls, name))


def is_openai_instrumented() -> bool:
    return _state.enabled
