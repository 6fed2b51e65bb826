"""Zero-code-change instrumentation of LiteLLM's `completion` / `acompletion` (streamed too).

`instrument_litellm()` replaces `litellm.completion` and `litellm.acompletion` so every call becomes one
`litellm.completion` span with the `gen_ai.*` attributes of a chat completion, usage, and the token ids a
vLLM-style backend returns (`hosted_vllm/...` with `return_token_ids`: LiteLLM keeps the top-level
`prompt_token_ids` and each choice's `token_ids`). The OpenAI client LiteLLM may use underneath is
suppressed for the call, so one call makes one span.

Code that bound the functions before instrumentation (`from litellm import completion` at import time of
a module loaded earlier) keeps the originals; `instrument_all()` runs when a tracer starts, usually
before agents are imported. Needs the `litellm` extra.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Callable, Optional

from agentlightning.types import Attributes

from .llm_calls import CallFormat, wrap_async_call, wrap_sync_call
from .openai_chat import ChatCompletionAccumulator, request_to_attributes, response_to_attributes

__all__ = [
    "LITELLM_SPAN_NAME",
    "LITELLM_FORMAT",
    "instrument_litellm",
    "uninstrument_litellm",
    "is_litellm_instrumented",
    "capture_prompt_token_ids",
]

logger = logging.getLogger(__name__)

LITELLM_SPAN_NAME = "litellm.completion"
_MARK = "__agentlightning_litellm_original__"


def _provider_of(model: Any) -> Optional[str]:
    if isinstance(model, str) and "/" in model:
        return model.split("/", 1)[0]
    return None


def _request_attributes(request: Mapping[str, Any]) -> Attributes:
    attributes = request_to_attributes(request, system=_provider_of(request.get("model")) or "litellm")
    if request.get("api_base") is not None:
        attributes["gen_ai.request.api_base"] = str(request["api_base"])
    return attributes


_traced_classes: dict[tuple[type, bool], type] = {}


class _StreamStep:
    """Around one step of a traced stream: its end (`end`) or an error finishes the call's span."""

    def __init__(self, stream: Any, end: type[Exception]) -> None:
        self.stream = stream
        self.end = end

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Any) -> None:
        if isinstance(exc, Exception):
            self.stream._agl_call.finish(
                self.stream._agl_accumulator.to_response(), None if isinstance(exc, self.end) else exc
            )


def _traced_stream_class(base: type, asynchronous: bool) -> type:
    """A subclass of LiteLLM's `CustomStreamWrapper` that feeds each chunk to the call's accumulator."""
    key = (base, asynchronous)
    if key in _traced_classes:
        return _traced_classes[key]

    if asynchronous:

        async def __anext__(self: Any) -> Any:
            with _StreamStep(self, StopAsyncIteration):
                chunk = await base.__anext__(self)  # type: ignore[attr-defined]
            self._agl_accumulator.add(chunk)
            return chunk

        namespace: dict[str, Any] = {"__anext__": __anext__}
    else:

        def __next__(self: Any) -> Any:
            with _StreamStep(self, StopIteration):
                chunk = base.__next__(self)  # type: ignore[attr-defined]
            self._agl_accumulator.add(chunk)
            return chunk

        namespace = {"__next__": __next__}
    traced = type(f"Traced{base.__name__}", (base,), namespace)
    _traced_classes[key] = traced
    return traced


def capture_prompt_token_ids(stream: Any, accumulator: ChatCompletionAccumulator) -> None:
    """LiteLLM drops the first chunk's top-level `prompt_token_ids`: read them from the raw chunk."""
    handler = getattr(stream, "completion_stream", None)
    parse = getattr(handler, "chunk_parser", None)
    if not callable(parse):
        return

    def chunk_parser(chunk: Any) -> Any:
        if isinstance(chunk, Mapping) and chunk.get("prompt_token_ids") is not None:
            accumulator.add({"prompt_token_ids": chunk["prompt_token_ids"]})
        return parse(chunk)

    try:
        handler.chunk_parser = chunk_parser  # type: ignore[union-attr]
    except AttributeError:
        logger.debug("cannot read prompt token ids from %s chunks", type(handler).__name__)


def _instrument_stream(result: Any, call: Any, asynchronous: bool) -> bool:
    if type(result).__name__ != "CustomStreamWrapper":
        return False
    result._agl_call = call
    result._agl_accumulator = accumulator = ChatCompletionAccumulator()
    capture_prompt_token_ids(result, accumulator)
    # A subclass keeps `isinstance(stream, CustomStreamWrapper)` true for the caller.
    result.__class__ = _traced_stream_class(type(result), asynchronous)
    return True


def _format(asynchronous: bool) -> CallFormat:
    """`acompletion` returns the same stream class as `completion`, consumed with the async protocol."""
    return CallFormat(
        LITELLM_SPAN_NAME,
        _request_attributes,
        response_to_attributes,
        ChatCompletionAccumulator,
        lambda result: hasattr(result, "choices"),
        lambda result, call: _instrument_stream(result, call, asynchronous),
    )


LITELLM_FORMAT = _format(asynchronous=False)
_LITELLM_ASYNC_FORMAT = _format(asynchronous=True)

_lock = threading.Lock()
_enabled = False
_originals: dict[str, Callable[..., Any]] = {}
# Our wrappers by identity (wrapt-style wrappers of other libraries proxy attribute checks).
_ours: dict[int, Callable[..., Any]] = {}


def _is_enabled() -> bool:
    return _enabled


def instrument_litellm() -> bool:
    """Replace `litellm.completion` / `acompletion` by traced versions (idempotent); False without LiteLLM."""
    global _enabled
    try:
        import litellm
    except ImportError:
        logger.debug("litellm is not installed; its completions are not auto-instrumented")
        return False
    with _lock:
        for name, wrap, call_format in (
            ("completion", wrap_sync_call, LITELLM_FORMAT),
            ("acompletion", wrap_async_call, _LITELLM_ASYNC_FORMAT),
        ):
            current = getattr(litellm, name)
            if id(current) in _ours:
                continue
            wrapper = wrap(current, call_format, _is_enabled)
            setattr(wrapper, _MARK, current)
            _ours[id(wrapper)] = wrapper
            _originals.setdefault(name, current)
            setattr(litellm, name, wrapper)
        _enabled = True
    return True


def uninstrument_litellm() -> None:
    """Undo `instrument_litellm()`."""
    global _enabled
    with _lock:
        _enabled = False
        try:
            import litellm
        except ImportError:
            return
        for name, original in _originals.items():
            if id(getattr(litellm, name)) in _ours:  # else another library wrapped ours: ours stays, inert
                setattr(litellm, name, original)
        _originals.clear()
        _ours.clear()


def is_litellm_instrumented() -> bool:
    return _enabled
