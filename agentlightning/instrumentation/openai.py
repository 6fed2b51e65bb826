"""Zero-code-change instrumentation of the `openai` client: chat completions and the Responses API.

`instrument_openai()` patches `create` and `parse` of `Completions` and `AsyncCompletions` (and of the
`beta.chat.completions` classes of older clients) so every chat completion (sync, async, streamed,
structured output via `parse` / `stream`, or through `with_raw_response`) becomes one `openai.chat.completion`
span with `gen_ai.*` request/response attributes, usage, and the token ids / logprobs a vLLM-style server
returns. `parse` needs its own wrapper: it posts the request itself instead of going through `create`, so
structured-output calls (e.g. LangChain's `with_structured_output`) would otherwise leave no span.

The request and response conversions (`request_to_attributes`, `response_to_attributes`) work on plain
JSON dicts and are shared with the LLM proxy; `ChatCompletionAccumulator` rebuilds a response dict from
streamed chunks so streamed calls get the same attributes.

`Responses` / `AsyncResponses` (`create`, `parse`, and `stream()` through `create`) are patched the same
way with the call format of `openai_responses`: one `openai.responses` span per call. `CallFormat` and
`wrap_sync_call` / `wrap_async_call` are reused by the Anthropic and LiteLLM instrumentations.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional

from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.trace import Status, StatusCode

from agentlightning.semconv import LOGPROBS_CONTENT, LOGPROBS_REFUSAL, PROMPT_TOKEN_IDS, RESPONSE_TOKEN_IDS
from agentlightning.types import Attributes
from agentlightning.utils.otel import format_exception_attributes

__all__ = [
    "LLM_SPAN_NAME",
    "instrument_openai",
    "uninstrument_openai",
    "is_openai_instrumented",
    "is_openai_wrapper",
    "request_to_attributes",
    "response_to_attributes",
    "ChatCompletionAccumulator",
    "CallFormat",
    "CHAT_FORMAT",
    "wrap_sync_call",
    "wrap_async_call",
    "materialize_iterables",
]

logger = logging.getLogger(__name__)

LLM_SPAN_NAME = "openai.chat.completion"

# Request fields recorded as `gen_ai.request.<field>`.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_completion_tokens",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "n",
    "seed",
    "stop",
    "logprobs",
    "top_logprobs",
    "stream",
    "reasoning_effort",
    "parallel_tool_calls",
    "user",
)

_SUPPRESS_KEY = otel_context._SUPPRESS_INSTRUMENTATION_KEY  # type: ignore[attr-defined]
_WRAPPED_MARK = "__agentlightning_wrapped__"


# ---- JSON helpers ----


def _as_dict(obj: Any) -> dict[str, Any]:
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


def _json(value: Any) -> str:
    return json.dumps(value, default=lambda o: _as_dict(o) or str(o))


def _int_list(value: Any) -> Optional[list[int]]:
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):  # type: ignore[union-attr]
        return [int(v) for v in value]  # type: ignore[union-attr]
    return None


def _content_attribute(content: Any) -> Optional[str]:
    if content is None:
        return None
    if isinstance(content, str):
        return content
    return _json(content)


def _tool_call_attributes(prefix: str, tool_calls: Any) -> Attributes:
    attributes: Attributes = {}
    for j, raw_call in enumerate(tool_calls or []):
        call = _as_dict(raw_call)
        function = _as_dict(call.get("function"))
        if call.get("id") is not None:
            attributes[f"{prefix}.tool_calls.{j}.id"] = str(call["id"])
        if function.get("name") is not None:
            attributes[f"{prefix}.tool_calls.{j}.name"] = str(function["name"])
        arguments = function.get("arguments")
        if arguments is not None:
            attributes[f"{prefix}.tool_calls.{j}.arguments"] = (
                arguments if isinstance(arguments, str) else _json(arguments)
            )
    return attributes


# ---- request / response -> attributes (shared with the LLM proxy) ----


def request_to_attributes(request: Mapping[str, Any], *, system: str = "openai") -> Attributes:
    """`gen_ai.*` attributes of a chat-completions request body (model, sampling params, messages, tools)."""
    attributes: Attributes = {"gen_ai.system": system, "gen_ai.request.type": "chat"}
    if request.get("model") is not None:
        attributes["gen_ai.request.model"] = str(request["model"])
    for field in SAMPLING_FIELDS:
        value = request.get(field)
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            attributes[f"gen_ai.request.{field}"] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):  # type: ignore[union-attr]
            attributes[f"gen_ai.request.{field}"] = [str(v) for v in value]  # type: ignore[union-attr]
        else:
            attributes[f"gen_ai.request.{field}"] = _json(value)
    for i, raw_message in enumerate(request.get("messages") or []):
        message = _as_dict(raw_message)
        prefix = f"gen_ai.prompt.{i}"
        if message.get("role") is not None:
            attributes[f"{prefix}.role"] = str(message["role"])
        content = _content_attribute(message.get("content"))
        if content is not None:
            attributes[f"{prefix}.content"] = content
        for key in ("name", "tool_call_id"):
            if message.get(key) is not None:
                attributes[f"{prefix}.{key}"] = str(message[key])
        attributes.update(_tool_call_attributes(prefix, message.get("tool_calls")))
    functions: list[dict[str, Any]] = []
    for raw_tool in request.get("tools") or []:
        tool = _as_dict(raw_tool)
        functions.append(_as_dict(tool.get("function")) if "function" in tool else tool)
    functions.extend(_as_dict(f) for f in request.get("functions") or [])
    for i, function in enumerate(functions):
        prefix = f"gen_ai.request.functions.{i}"
        if function.get("name") is not None:
            attributes[f"{prefix}.name"] = str(function["name"])
        if function.get("description") is not None:
            attributes[f"{prefix}.description"] = str(function["description"])
        if function.get("parameters") is not None:
            attributes[f"{prefix}.parameters"] = _json(function["parameters"])
    return attributes


def _response_token_ids(choice: Mapping[str, Any]) -> Optional[list[int]]:
    token_ids = _int_list(choice.get("token_ids"))
    if token_ids is None:
        token_ids = _int_list(_as_dict(choice.get("provider_specific_fields")).get("token_ids"))
    return token_ids


def response_to_attributes(response: Mapping[str, Any]) -> Attributes:
    """`gen_ai.*` attributes of a chat-completions response body, plus token ids and logprobs.

    Token ids follow vLLM's `return_token_ids`: top-level `prompt_token_ids` and per-choice `token_ids`
    (the first choice's become `response_token_ids`).
    """
    attributes: Attributes = {}
    if response.get("id") is not None:
        attributes["gen_ai.response.id"] = str(response["id"])
    if response.get("model") is not None:
        attributes["gen_ai.response.model"] = str(response["model"])
    if response.get("system_fingerprint") is not None:
        attributes["gen_ai.response.system_fingerprint"] = str(response["system_fingerprint"])
    choices = [_as_dict(c) for c in response.get("choices") or []]
    for position, choice in enumerate(choices):
        index = choice.get("index", position)
        index = index if isinstance(index, int) else position
        message = _as_dict(choice.get("message"))
        prefix = f"gen_ai.completion.{index}"
        if message.get("role") is not None:
            attributes[f"{prefix}.role"] = str(message["role"])
        content = _content_attribute(message.get("content"))
        if content is not None:
            attributes[f"{prefix}.content"] = content
        if message.get("refusal") is not None:
            attributes[f"{prefix}.refusal"] = str(message["refusal"])
        if choice.get("finish_reason") is not None:
            attributes[f"{prefix}.finish_reason"] = str(choice["finish_reason"])
        attributes.update(_tool_call_attributes(prefix, message.get("tool_calls")))
        function_call = _as_dict(message.get("function_call"))
        if function_call and not message.get("tool_calls"):
            attributes.update(_tool_call_attributes(prefix, [{"function": function_call}]))
    usage = _as_dict(response.get("usage"))
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        if isinstance(usage.get(key), int):
            attributes[f"gen_ai.usage.{key}"] = usage[key]
    prompt_token_ids = _int_list(response.get("prompt_token_ids"))
    if prompt_token_ids is None and choices:
        prompt_token_ids = _int_list(choices[0].get("prompt_token_ids"))
    if prompt_token_ids is not None:
        attributes[PROMPT_TOKEN_IDS] = prompt_token_ids
    if choices:
        response_token_ids = _response_token_ids(choices[0])
        if response_token_ids is not None:
            attributes[RESPONSE_TOKEN_IDS] = response_token_ids
        logprobs = _as_dict(choices[0].get("logprobs"))
        if logprobs.get("content") is not None:
            attributes[LOGPROBS_CONTENT] = _json(logprobs["content"])
        if logprobs.get("refusal") is not None:
            attributes[LOGPROBS_REFUSAL] = _json(logprobs["refusal"])
    return attributes


class ChatCompletionAccumulator:
    """Rebuilds a chat-completion response dict from streamed chunks (content, tool calls, usage, token ids)."""

    def __init__(self) -> None:
        self._response: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}

    def add(self, chunk: Any) -> None:
        data = _as_dict(chunk)
        for key in ("id", "model", "system_fingerprint", "created"):
            if data.get(key) is not None and key not in self._response:
                self._response[key] = data[key]
        if data.get("usage"):
            self._response["usage"] = _as_dict(data["usage"])
        prompt_token_ids = _int_list(data.get("prompt_token_ids"))
        if prompt_token_ids is not None:
            self._response["prompt_token_ids"] = prompt_token_ids
        for raw_choice in data.get("choices") or []:
            self._add_choice(_as_dict(raw_choice))

    def _add_choice(self, delta_choice: dict[str, Any]) -> None:
        index = delta_choice.get("index") or 0
        choice = self._choices.setdefault(index, {"index": index, "message": {"role": "assistant"}})
        message = choice["message"]
        delta = _as_dict(delta_choice.get("delta"))
        if delta.get("role"):
            message["role"] = delta["role"]
        for key in ("content", "refusal"):
            if delta.get(key):
                message[key] = (message.get(key) or "") + str(delta[key])
        for raw_call in delta.get("tool_calls") or []:
            call_delta = _as_dict(raw_call)
            calls: list[dict[str, Any]] = message.setdefault("tool_calls", [])
            call_index = call_delta.get("index")
            call_index = call_index if isinstance(call_index, int) else len(calls)
            while len(calls) <= call_index:
                calls.append({"id": None, "type": "function", "function": {"name": None, "arguments": ""}})
            call = calls[call_index]
            if call_delta.get("id"):
                call["id"] = call_delta["id"]
            function_delta = _as_dict(call_delta.get("function"))
            if function_delta.get("name"):
                call["function"]["name"] = (call["function"]["name"] or "") + str(function_delta["name"])
            if function_delta.get("arguments"):
                call["function"]["arguments"] += str(function_delta["arguments"])
        if delta_choice.get("finish_reason") is not None:
            choice["finish_reason"] = delta_choice["finish_reason"]
        token_ids = _response_token_ids(delta_choice)
        if token_ids is not None:
            choice.setdefault("token_ids", []).extend(token_ids)
        prompt_token_ids = _int_list(delta_choice.get("prompt_token_ids"))
        if prompt_token_ids is not None:
            self._response.setdefault("prompt_token_ids", prompt_token_ids)
        logprobs = _as_dict(delta_choice.get("logprobs"))
        for key in ("content", "refusal"):
            if logprobs.get(key):
                choice.setdefault("logprobs", {}).setdefault(key, []).extend(logprobs[key])

    def to_response(self) -> dict[str, Any]:
        """The response as if it had not been streamed."""
        response = dict(self._response)
        response["choices"] = [self._choices[i] for i in sorted(self._choices)]
        return response


# ---- span lifecycle ----


def _tracer() -> trace_api.Tracer:
    return trace_api.get_tracer("agentlightning.instrumentation.openai")


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


CHAT_FORMAT = CallFormat(
    LLM_SPAN_NAME,
    request_to_attributes,
    response_to_attributes,
    ChatCompletionAccumulator,
    lambda result: hasattr(result, "choices"),
)


class _LLMCall:
    """The span of one LLM API call; ends exactly once."""

    def __init__(self, request: Mapping[str, Any], call_format: CallFormat = CHAT_FORMAT) -> None:
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
            self.span.set_attributes(call_format.request_attributes(request))

    def finish(self, response: Optional[Mapping[str, Any]] = None, error: Optional[BaseException] = None) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = True
        try:
            if self.span.is_recording():
                if response is not None:
                    self.span.set_attributes(self.format.response_attributes(response))
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


def _instrument_sync_stream(stream: Any, call: _LLMCall) -> None:
    """Wrap a `Stream` in place (its type stays `openai.Stream`) so the span ends with the stream."""
    accumulator = call.format.accumulator()
    original_iterator = stream._iterator
    original_close = stream.close

    def iterate() -> Any:
        error: Optional[BaseException] = None
        try:
            for chunk in original_iterator:
                accumulator.add(chunk)
                yield chunk
        except Exception as exc:
            error = exc
            raise
        finally:
            call.finish(accumulator.to_response(), error)

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
        error: Optional[BaseException] = None
        try:
            async for chunk in original_iterator:
                accumulator.add(chunk)
                yield chunk
        except Exception as exc:
            error = exc
            raise
        finally:
            call.finish(accumulator.to_response(), error)

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
        call.finish(_as_dict(target))
    else:
        # e.g. `with_streaming_response`, whose body is read later by the caller: request attributes only.
        call.finish()


def _suppressed() -> bool:
    return bool(otel_context.get_value(_SUPPRESS_KEY))


def _call_suppressed(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the wrapped `create` with inner instrumentations suppressed, so one call makes one span."""
    token = otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))
    try:
        return func(*args, **kwargs)
    finally:
        otel_context.detach(token)


def _use_span(span: trace_api.Span) -> Any:
    return trace_api.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False)


def wrap_sync_call(
    original: Callable[..., Any], call_format: CallFormat, enabled: Callable[[], bool]
) -> Callable[..., Any]:
    """A wrapper of a sync client method that records each call as one `call_format` span."""

    @functools.wraps(original)
    def create(*args: Any, **kwargs: Any) -> Any:
        if not enabled() or _suppressed():
            return original(*args, **kwargs)
        call = _start_call(kwargs, call_format)
        if call is None:
            return original(*args, **kwargs)
        try:
            with _use_span(call.span):
                result = _call_suppressed(original, *args, **kwargs)
        except Exception as exc:
            call.finish(error=exc)
            raise
        _finish_call(result, call)
        return result

    setattr(create, _WRAPPED_MARK, original)
    return create


def wrap_async_call(
    original: Callable[..., Any], call_format: CallFormat, enabled: Callable[[], bool]
) -> Callable[..., Any]:
    """A wrapper of an async client method that records each call as one `call_format` span."""

    @functools.wraps(original)
    async def create(*args: Any, **kwargs: Any) -> Any:
        if not enabled() or _suppressed():
            return await original(*args, **kwargs)
        call = _start_call(kwargs, call_format)
        if call is None:
            return await original(*args, **kwargs)
        try:
            with _use_span(call.span):
                token = otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))
                try:
                    result = await original(*args, **kwargs)
                finally:
                    otel_context.detach(token)
        except Exception as exc:
            call.finish(error=exc)
            raise
        _finish_call(result, call)
        return result

    setattr(create, _WRAPPED_MARK, original)
    return create


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
                current = getattr(current, _WRAPPED_MARK)
                setattr(cls, name, current)
            _state.installed.discard((cls, name))


def is_openai_instrumented() -> bool:
    return _state.enabled
