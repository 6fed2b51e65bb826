"""Annotations and operations: structured facts about what the agent did, recorded as spans."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Callable, Optional, TypeVar, Union, cast, overload

from agentlightning.semconv import AGL_ANNOTATION, AGL_OPERATION, LightningSpanAttributes
from agentlightning.types import Attributes, AttributeValue, SpanCoreFields, SpanRecordingContext
from agentlightning.utils.otel import flatten_attributes, sanitize_attribute_value, sanitize_attributes

from ._tracer import log_emitted, resolve_tracer

__all__ = ["emit_annotation", "operation", "OperationContext"]

F = TypeVar("F", bound=Callable[..., Any])

_OPERATION_NAME = LightningSpanAttributes.OPERATION_NAME.value
_INPUT = LightningSpanAttributes.OPERATION_INPUT.value
_OUTPUT = LightningSpanAttributes.OPERATION_OUTPUT.value


def _check_keys(annotation: Mapping[str, Any]) -> None:
    for key in annotation:
        if not isinstance(key, str) or not key:  # type: ignore[redundant-expr]
            raise ValueError(f"annotation keys must be non-empty strings, got {key!r}")
        if key.startswith(".") or key.endswith(".") or ".." in key:
            raise ValueError(f"annotation key {key!r} has an empty dotted segment")


def _annotation_value(key: str, value: Any) -> AttributeValue:
    """A flattened annotation value as an attribute; ValueError naming `key` when it cannot be recorded."""
    if value is None:
        raise ValueError(f"annotation {key!r} is None; omit the key instead")
    if isinstance(value, (set, frozenset)):
        value = sorted(value, key=repr)  # type: ignore[arg-type]
    try:
        return sanitize_attribute_value(value, force=False, key=key)
    except ValueError:
        pass
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"annotation {key!r}: a {type(value).__name__} cannot be recorded; use str, bool, int, float, "
            "lists and dicts of them"
        ) from exc


def emit_annotation(annotation: Mapping[str, Any], propagate: bool = True) -> SpanCoreFields:
    """Record a (possibly nested) dict as an `agentlightning.annotation` span with flattened attributes.

    Nested dicts become dotted keys; lists of plain values of one type stay one attribute (a set becomes
    such a list); other JSON-serialisable values are JSON text. Everything is validated before the tracer
    is looked up: a None value or an object that cannot be serialised raises ValueError naming its key.
    """
    if not isinstance(annotation, Mapping):  # type: ignore[redundant-expr]
        raise TypeError(f"emit_annotation expects a dict, got {type(annotation).__name__}")
    _check_keys(annotation)
    flat = flatten_attributes(annotation)
    attributes: Attributes = {key: _annotation_value(key, value) for key, value in flat.items()}
    tracer = resolve_tracer(propagate, "emit_annotation")
    return log_emitted(tracer.create_span(AGL_ANNOTATION, attributes=attributes))


def _value_attributes(prefix: str, value: Any) -> Attributes:
    """Attributes describing one input/output value under `prefix` (nested structures are flattened)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        value = dump(mode="json")
    if isinstance(value, Mapping) or (isinstance(value, (list, tuple)) and value):
        if isinstance(value, Mapping) and not value:
            return sanitize_attributes({prefix: {}})
        flat = flatten_attributes({prefix: value}, expand_leaf_lists=False)  # type: ignore[dict-item]
        return sanitize_attributes(flat)
    return sanitize_attributes({prefix: value})


class OperationContext:
    """One `agentlightning.operation` span; a decorator and a sync/async context manager.

    As a context manager, call `set_input(...)` / `set_output(...)` inside the block. As a decorator,
    each call of the function records the function name, its bound arguments and its return value.
    Exceptions are recorded on the span (status ERROR) and re-raised.
    """

    def __init__(self, attributes: Optional[Mapping[str, Any]] = None, *, propagate: bool = True) -> None:
        self._attributes = sanitize_attributes(dict(attributes or {}))
        self._propagate = propagate
        self._cm: Optional[AbstractContextManager[SpanRecordingContext]] = None
        self._recording: Optional[SpanRecordingContext] = None

    # ---- context manager ----

    def _open(self, extra: Optional[Attributes] = None) -> OperationContext:
        if self._cm is not None:
            raise RuntimeError("this operation context is already open; create a new operation(...) per block")
        tracer = resolve_tracer(self._propagate, "operation")
        self._cm = tracer.operation_context(AGL_OPERATION, attributes={**self._attributes, **(extra or {})})
        self._recording = self._cm.__enter__()
        return self

    def _close(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool:
        cm, self._cm = self._cm, None
        assert cm is not None
        return bool(cm.__exit__(exc_type, exc, tb))

    def __enter__(self) -> OperationContext:
        return self._open()

    def __exit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool:
        return self._close(exc_type, exc, tb)

    async def __aenter__(self) -> OperationContext:
        return self._open()

    async def __aexit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool:
        return self._close(exc_type, exc, tb)

    def _record(self, attributes: Attributes) -> None:
        if self._recording is None:
            raise RuntimeError("set_input/set_output must be called inside the `with operation(...)` block")
        self._recording.record_attributes(attributes)

    def set_input(self, *args: Any, **kwargs: Any) -> None:
        """Record inputs: positional ones as `agentlightning.operation.input.args.<i>`, keyword ones by name."""
        attributes: Attributes = {}
        for i, value in enumerate(args):
            attributes.update(_value_attributes(f"{_INPUT}.args.{i}", value))
        for key, value in kwargs.items():
            attributes.update(_value_attributes(f"{_INPUT}.{key}", value))
        self._record(attributes)

    def set_output(self, output: Any) -> None:
        """Record the result as `agentlightning.operation.output` (flattened for dicts/lists)."""
        self._record(_value_attributes(_OUTPUT, output))

    def get_recorded_span(self) -> Optional[SpanCoreFields]:
        return self._recording.get_recorded_span() if self._recording is not None else None

    # ---- decorator ----

    def __call__(self, fn: F) -> F:
        signature = inspect.signature(fn)
        attributes, propagate = self._attributes, self._propagate

        def start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> OperationContext:
            op = OperationContext(attributes, propagate=propagate)
            op._open({_OPERATION_NAME: fn.__name__})
            op._record(_bound_input_attributes(signature, args, kwargs))
            return op

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                op = start(args, kwargs)
                try:
                    result = await fn(*args, **kwargs)
                    op.set_output(result)
                except BaseException as exc:
                    if not op._close(type(exc), exc, exc.__traceback__):
                        raise
                    return None
                op._close(None, None, None)
                return result

            return cast(F, async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            op = start(args, kwargs)
            try:
                result = fn(*args, **kwargs)
                op.set_output(result)
            except BaseException as exc:
                if not op._close(type(exc), exc, exc.__traceback__):
                    raise
                return None
            op._close(None, None, None)
            return result

        return cast(F, wrapper)


def _bound_input_attributes(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Attributes:
    try:
        bound = signature.bind_partial(*args, **kwargs)
    except TypeError:
        # The call itself will raise the same error; record raw arguments meanwhile.
        bound = None
    attributes: Attributes = {}
    if bound is None:
        for i, value in enumerate(args):
            attributes.update(_value_attributes(f"{_INPUT}.args.{i}", value))
        for key, value in kwargs.items():
            attributes.update(_value_attributes(f"{_INPUT}.{key}", value))
        return attributes
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if name in ("self", "cls") and kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
            continue
        if kind is inspect.Parameter.VAR_POSITIONAL:
            for i, item in enumerate(value):
                attributes.update(_value_attributes(f"{_INPUT}.args.{i}", item))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            for key, item in value.items():
                attributes.update(_value_attributes(f"{_INPUT}.{key}", item))
        else:
            attributes.update(_value_attributes(f"{_INPUT}.{name}", value))
    return attributes


@overload
def operation(fn: F) -> F: ...
@overload
def operation(fn: None = None, *, propagate: bool = True, **attributes: Any) -> OperationContext: ...
def operation(fn: Optional[F] = None, *, propagate: bool = True, **attributes: Any) -> Union[F, OperationContext]:
    """Trace an operation: `@operation`, `@operation(category="x")`, or `with operation(user_id=1) as op:`."""
    if fn is not None:
        if not callable(fn):
            raise TypeError(f"operation() takes a function or keyword attributes, got {fn!r}")
        return OperationContext(attributes, propagate=propagate)(fn)
    return OperationContext(attributes, propagate=propagate)
