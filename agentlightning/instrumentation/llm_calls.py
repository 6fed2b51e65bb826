"""One LLM API call as one span: the machinery every client instrumentation shares.

A `CallFormat` says how one API (OpenAI chat completions or Responses, Anthropic Messages, LiteLLM) maps
its request and final response to `gen_ai.*` attributes and how its stream is accumulated.
`wrap_sync_call` / `wrap_async_call` turn a client method into one that opens the span, runs the call with
inner instrumentations suppressed (so one call makes one span), and ends the span with the response, at
once or when the returned stream ends. Instrumentation problems are logged, never raised into the agent.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Optional

from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.trace import Status, StatusCode

from agentlightning.attributes.genai import latest_genai_attributes, latest_genai_enabled
from agentlightning.attributes.otel import format_exception_attributes
from agentlightning.types import Attributes

__all__ = [
    "CallFormat",
    "WRAPPED_MARK",
    "as_dict",
    "client_capture_off",
    "materialize_iterables",
    "without_client_capture",
    "wrap_sync_call",
    "wrap_async_call",
]

logger = logging.getLogger(__name__)

_SUPPRESS_KEY = otel_context._SUPPRESS_INSTRUMENTATION_KEY  # type: ignore[attr-defined]
WRAPPED_MARK = "__agentlightning_wrapped__"
"""Attribute of every wrapper made here, pointing at the function it wraps."""


def as_dict(obj: Any) -> dict[str, Any]:
    """A JSON-like dict from a dict, a pydantic model (extras included) or any object with attributes."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return dict(obj)  # type: ignore[arg-type]
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            # `ParsedChatCompletion.parsed` holds the caller's model where the schema says None: no warning.
            return dump(warnings=False)  # type: ignore[no-any-return]
        except TypeError:
            return dump()  # type: ignore[no-any-return]
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")} if hasattr(obj, "__dict__") else {}


def _tracer() -> trace_api.Tracer:
    return trace_api.get_tracer("agentlightning.instrumentation.openai")  # the scope name spans always had


@dataclass(frozen=True)
class CallFormat:
    """How one API (chat completions, Responses, Anthropic Messages, LiteLLM) becomes an LLM span.

    `request_attributes` / `response_attributes` turn the JSON request / final response into `gen_ai.*`
    attributes; `accumulator()` makes an object with `add(event)` and `to_response()` that rebuilds the final
    response of a stream; `is_response(obj)` recognises a complete (unstreamed) result.
    """

    span_name: str
    request_attributes: Callable[[Mapping[str, Any]], Attributes]
    response_attributes: Callable[[Mapping[str, Any]], Attributes]
    accumulator: Callable[[], Any]
    is_response: Callable[[Any], bool]
    instrument_stream: Optional[Callable[[Any, Any], bool]] = None
    """For clients whose streams are not OpenAI/Anthropic `Stream`s: instrument `(result, call)` in place and
    return True, or return False when `result` is not a stream of that client."""


def _with_latest_names(attributes: Attributes) -> Attributes:
    """The v0.3 attributes, plus today's GenAI names when `OTEL_SEMCONV_STABILITY_OPT_IN` asks for them."""
    return {**attributes, **latest_genai_attributes(attributes)} if latest_genai_enabled() else attributes


class _LLMCall:
    """The span of one LLM API call; ends exactly once."""

    def __init__(self, request: Mapping[str, Any], call_format: CallFormat) -> None:
        parent = trace_api.get_current_span()
        self._lock = threading.Lock()
        self._ended = False
        self.format = call_format
        # When another instrumentation (e.g. AgentOps) already opened the span for this same call, enrich
        # it instead of opening a second one.
        if parent.is_recording() and getattr(parent, "name", None) == call_format.span_name:
            self.span, self.owned = parent, False
        else:
            span = _tracer().start_span(call_format.span_name, kind=trace_api.SpanKind.CLIENT)
            self.span, self.owned = span, True
        if self.span.is_recording():
            self.span.set_attributes(_with_latest_names(call_format.request_attributes(request)))

    def finish(self, response: Optional[Mapping[str, Any]] = None, error: Optional[BaseException] = None) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        try:
            if self.span.is_recording():
                if response is not None:
                    self.span.set_attributes(_with_latest_names(self.format.response_attributes(response)))
                if error is not None:
                    self.span.set_attributes(format_exception_attributes(error))
                    self.span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        except Exception:
            logger.exception("could not record response attributes on span %s", self.format.span_name)
        finally:
            if self.owned:
                self.span.end()


def materialize_iterables(kwargs: dict[str, Any]) -> None:
    """The client accepts any iterable of messages/tools; read one-shot iterators once, for us and the call."""
    for key in ("messages", "tools", "functions", "input", "system"):
        value = kwargs.get(key)
        if value is not None and not isinstance(value, (list, tuple, Mapping, str)) and hasattr(value, "__iter__"):
            kwargs[key] = list(value)


def _start_call(kwargs: dict[str, Any], call_format: CallFormat) -> Optional[_LLMCall]:
    """Open the span of a call; instrumentation problems are logged, never raised into the agent."""
    try:
        materialize_iterables(kwargs)
        return _LLMCall(_request_from_kwargs(kwargs), call_format)
    except Exception:
        logger.exception("could not start the %s span; the call proceeds untraced", call_format.span_name)
        return None


def _finish_call(result: Any, call: _LLMCall) -> None:
    try:
        _handle_result(result, call)
    except Exception:
        logger.exception("could not record the result of an LLM call on its %s span", call.format.span_name)
        call.finish()


def _request_from_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    request = {k: v for k, v in kwargs.items() if not k.startswith("extra_") and k != "timeout"}
    extra_body = kwargs.get("extra_body")
    if isinstance(extra_body, Mapping):
        request.update(extra_body)  # type: ignore[arg-type]
    return {k: v for k, v in request.items() if _is_given(v)}


def _is_given(value: Any) -> bool:
    return value is not None and type(value).__name__ not in ("NotGiven", "Omit")


@contextmanager
def _finishing(call: _LLMCall, accumulator: Any) -> Iterator[None]:
    """Around reading a stream: the call's span ends with what was read, and the error that stopped it."""
    error: Optional[BaseException] = None
    try:
        yield
    except Exception as exc:
        error = exc
        raise
    finally:
        call.finish(accumulator.to_response(), error)


def _instrument_sync_stream(stream: Any, call: _LLMCall) -> None:
    """Wrap a `Stream` in place (its type stays `openai.Stream`) so the span ends with the stream."""
    accumulator = call.format.accumulator()
    original_iterator = stream._iterator
    original_close = stream.close

    def iterate() -> Any:
        with _finishing(call, accumulator):
            for chunk in original_iterator:
                accumulator.add(chunk)
                yield chunk

    def close() -> None:
        try:
            original_close()
        finally:
            call.finish(accumulator.to_response())

    stream._iterator = iterate()
    stream.close = close


def _instrument_async_stream(stream: Any, call: _LLMCall) -> None:
    accumulator = call.format.accumulator()
    original_iterator = stream._iterator
    original_close = stream.close

    async def iterate() -> Any:
        with _finishing(call, accumulator):
            async for chunk in original_iterator:
                accumulator.add(chunk)
                yield chunk

    async def close() -> None:
        try:
            await original_close()
        finally:
            call.finish(accumulator.to_response())

    stream._iterator = iterate()
    stream.close = close


def _handle_result(result: Any, call: _LLMCall) -> None:
    """Attach the call's span to whatever `create` returned: a completion, a stream, or a raw response."""
    target = result
    parse = getattr(result, "parse", None)
    if type(result).__name__ == "LegacyAPIResponse" and callable(parse):
        target = parse()  # cached by the response, so the caller's own parse() returns the same object
    # OpenAI's and Anthropic's `Stream` / `AsyncStream` (same generator) read events from `_iterator`.
    iterator = getattr(target, "_iterator", None)
    if call.format.instrument_stream is not None and call.format.instrument_stream(target, call):
        return
    if inspect.isgenerator(iterator) and callable(getattr(target, "close", None)):
        _instrument_sync_stream(target, call)
    elif inspect.isasyncgen(iterator) and callable(getattr(target, "close", None)):
        _instrument_async_stream(target, call)
    elif call.format.is_response(target):
        call.finish(as_dict(target))
    else:
        # e.g. `with_streaming_response`, whose body is read later by the caller: request attributes only.
        call.finish()


_CAPTURE_OFF_KEY = otel_context.create_key("agentlightning.llm_client_capture_off")


def client_capture_off() -> bool:
    """True inside `without_client_capture()`: LLM client calls there are not recorded as spans."""
    return bool(otel_context.get_value(_CAPTURE_OFF_KEY))


@contextmanager
def without_client_capture() -> Iterator[None]:
    """Record no LLM client spans in this context (and the tasks/threads that copy it).

    The client patches are process-wide and stay installed; a tracer made with `instrument_openai=False`
    opens its trace contexts inside this, so another tracer's instrumentation earlier in the process does
    not record client calls for it (e.g. an agent whose calls the LLM proxy records already). Our wrappers
    then call the client with OpenTelemetry instrumentation suppressed, so the libraries wrapped below ours
    (AgentOps, the Anthropic SDK's own spans) record nothing either.
    """
    token = otel_context.attach(otel_context.set_value(_CAPTURE_OFF_KEY, True))
    try:
        yield
    finally:
        otel_context.detach(token)


def _suppressed() -> bool:
    return bool(otel_context.get_value(_SUPPRESS_KEY))


@contextmanager
def _inner_capture_suppressed(suppress: bool) -> Iterator[None]:
    """Around the wrapped `create`: inner instrumentations suppressed (when `suppress`), so one call makes one span."""
    if not suppress:
        yield
        return
    token = otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))
    try:
        yield
    finally:
        otel_context.detach(token)


def _plan_call(
    kwargs: dict[str, Any], call_format: CallFormat, enabled: Callable[[], bool]
) -> tuple[bool, Optional[_LLMCall]]:
    """Whether to suppress inner capture around one client call, and the call's open span if it is recorded."""
    if client_capture_off():
        return True, None
    if not enabled() or _suppressed():
        return False, None
    call = _start_call(kwargs, call_format)
    return call is not None, call


@contextmanager
def _recorded_call(suppress: bool, call: Optional[_LLMCall]) -> Iterator[None]:
    """The block that makes the client call: inside the call's span, an exception finishing it with an error."""
    if call is None:
        with _inner_capture_suppressed(suppress):
            yield
        return
    try:
        with trace_api.use_span(call.span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            with _inner_capture_suppressed(suppress):
                yield
    except Exception as exc:
        call.finish(error=exc)
        raise


def wrap_sync_call(
    original: Callable[..., Any], call_format: CallFormat, enabled: Callable[[], bool]
) -> Callable[..., Any]:
    """A wrapper of a sync client method that records each call as one `call_format` span."""

    @functools.wraps(original)
    def create(*args: Any, **kwargs: Any) -> Any:
        suppress, call = _plan_call(kwargs, call_format, enabled)
        with _recorded_call(suppress, call):
            result = original(*args, **kwargs)
        if call is not None:
            _finish_call(result, call)
        return result

    setattr(create, WRAPPED_MARK, original)
    return create


async def _awaited(value: Any) -> Any:
    """The final result of an async client call, however many un-awaited coroutines wrap it.

    While our span is open we set OpenTelemetry's suppress-instrumentation key so that a library wrapped
    *inside* us does not record the call twice. AgentOps' async wrapper honours the key with
    `return wrapped(*args, **kwargs)` inside its `async def`, i.e. it returns the inner coroutine
    un-awaited; when its wrapper sits between two of ours (it re-instruments lazily), one `await` yields a
    coroutine. The caller of an `async` SDK method must still get the SDK's result.
    """
    while inspect.isawaitable(value):
        value = await value
    return value


def wrap_async_call(
    original: Callable[..., Any], call_format: CallFormat, enabled: Callable[[], bool]
) -> Callable[..., Any]:
    """A wrapper of an async client method that records each call as one `call_format` span."""

    @functools.wraps(original)
    async def create(*args: Any, **kwargs: Any) -> Any:
        suppress, call = _plan_call(kwargs, call_format, enabled)
        with _recorded_call(suppress, call):
            result = await _awaited(original(*args, **kwargs))
        if call is not None:
            _finish_call(result, call)
        return result

    setattr(create, WRAPPED_MARK, original)
    return create
