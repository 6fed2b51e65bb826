"""Annotations and operations: structured facts about what the agent did, recorded as spans."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any, Callable, Optional, TypeVar, Union, cast, overload

from agentlightning.attributes.otel import check_attributes_sanity, flatten_attributes, sanitize_attributes
from agentlightning.semconv import AGL_ANNOTATION, AGL_OPERATION, LightningSpanAttributes
from agentlightning.tracer.base import Tracer
from agentlightning.types import Attributes, SpanCoreFields, SpanRecordingContext, TraceStatus

from ._tracer import log_emitted, resolve_tracer

__all__ = ["emit_annotation", "operation", "OperationContext"]

F = TypeVar("F", bound=Callable[..., Any])

_OPERATION_NAME = LightningSpanAttributes.OPERATION_NAME.value
_INPUT = LightningSpanAttributes.OPERATION_INPUT.value
_OUTPUT = LightningSpanAttributes.OPERATION_OUTPUT.value


def _sets_as_lists(value: Any) -> Any:
    """Sets become sorted lists (an addition to v0.3, which refuses them)."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)  # type: ignore[arg-type]
    if isinstance(value, dict):
        return {key: _sets_as_lists(child) for key, child in value.items()}  # type: ignore[union-attr]
    if isinstance(value, list):
        return [_sets_as_lists(child) for child in value]  # type: ignore[union-attr]
    return value


def emit_annotation(annotation: Mapping[str, Any], propagate: bool = True) -> SpanCoreFields:
    """Record a (possibly nested) dict as an `agentlightning.annotation` span (status OK), as v0.3.

    Nested dicts and lists of objects become dotted keys; a list of primitives of one type stays one
    attribute. The flattened values must be str, int, float, bool or lists of them: anything else (None,
    objects) raises ValueError naming the key, before the tracer is looked up.
    """
    if not isinstance(annotation, Mapping):  # type: ignore[redundant-expr]
        raise TypeError(f"emit_annotation expects a dict, got {type(annotation).__name__}")
    flat = flatten_attributes(_sets_as_lists(dict(annotation)), expand_leaf_lists=False)
    check_attributes_sanity(flat)
    attributes = sanitize_attributes(flat)
    tracer = resolve_tracer(propagate, "emit_annotation")
    return log_emitted(tracer.create_span(AGL_ANNOTATION, attributes=attributes, status=TraceStatus(status_code="OK")))


def _value_attributes(prefix: str, value: Any) -> Attributes:
    """Attributes describing one input/output value under `prefix`, flattened as v0.3 does.

    A pydantic model is recorded by its fields (v0.3 recorded only its `str()`).
    """
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        value = dump(mode="json")
    try:
        flat = flatten_attributes({prefix: value}, expand_leaf_lists=False)
    except ValueError:
        flat = {prefix: value}  # e.g. dict keys that are not strings: recorded as JSON rather than failing the call
    return sanitize_attributes(flat)


class OperationContext:
    """One `agentlightning.operation` span; a decorator and a sync/async context manager (v0.3's shape).

    As a context manager, call `set_input(...)` / `set_output(...)` inside the block and `span()` after it.
    As a decorator, each call of the function records the function name (unless `name=` was given), its
    bound arguments and its return value. Exceptions are recorded on the span (status ERROR) and re-raised.

    The tracer is looked up when a span opens (v0.3 looked it up at construction, so decorating a function
    at import time failed without an active tracer, and later calls went to the tracer of that moment).
    """

    def __init__(self, name: str, attributes: Optional[Mapping[str, Any]] = None, propagate: bool = True) -> None:
        if not isinstance(name, str):  # type: ignore[redundant-expr]
            raise TypeError(f"OperationContext name must be a span name (str), got {type(name).__name__}")
        self.name = name
        self.initial_attributes: dict[str, Any] = flatten_attributes(dict(attributes or {}), expand_leaf_lists=False)
        self.propagate = propagate
        self._cm: Optional[AbstractContextManager[SpanRecordingContext]] = None
        self._recording: Optional[SpanRecordingContext] = None
        self._span: Optional[SpanCoreFields] = None

    @property
    def tracer(self) -> Tracer:
        """The tracer spans go to: the active one (RuntimeError if none), or a DummyTracer with `propagate=False`."""
        return resolve_tracer(self.propagate, "operation")

    # ---- context manager ----

    def _open(self, attributes: Optional[Mapping[str, Any]] = None) -> OperationContext:
        if self._cm is not None:
            raise RuntimeError("this operation context is already open; create a new operation(...) per block")
        initial = sanitize_attributes(self.initial_attributes if attributes is None else attributes)
        self._cm = self.tracer.operation_context(self.name, attributes=initial)
        self._recording = self._cm.__enter__()
        self._span = None
        return self

    def _close(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool:
        cm, self._cm = self._cm, None
        assert cm is not None
        try:
            return bool(cm.__exit__(exc_type, exc, tb))
        finally:
            if self._recording is not None:
                self._span = self._recording.get_recorded_span()
            self._recording = None

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

    def span(self) -> SpanCoreFields:
        """The recorded span, once the block (or decorated call) has finished; RuntimeError before."""
        if self._span is None:
            raise RuntimeError("the operation span is not finished yet; call span() after the `with` block")
        return self._span

    def get_recorded_span(self) -> Optional[SpanCoreFields]:
        """The span recorded so far (inside the block) or the finished span; None before the block."""
        if self._recording is not None:
            return self._recording.get_recorded_span()
        return self._span

    # ---- decorator ----

    def __call__(self, fn: F) -> F:
        signature = inspect.signature(fn)
        name, propagate = self.name, self.propagate
        attributes = {_OPERATION_NAME: fn.__name__, **self.initial_attributes}

        @contextmanager
        def call_span(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[OperationContext]:
            """One call's span; an exception the tracer's context swallows makes the call return None."""
            op = OperationContext(name, propagate=propagate)
            op._open(attributes)
            op._record(_bound_input_attributes(signature, args, kwargs))
            try:
                yield op
            except BaseException as exc:
                if not op._close(type(exc), exc, exc.__traceback__):
                    raise
                return
            op._close(None, None, None)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with call_span(args, kwargs) as op:
                    result = await fn(*args, **kwargs)
                    op.set_output(result)
                    return result
                return None

            return cast(F, async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with call_span(args, kwargs) as op:
                result = fn(*args, **kwargs)
                op.set_output(result)
                return result
            return None

        return cast(F, wrapper)


def _bound_input_attributes(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Attributes:
    """The call's arguments under `agentlightning.operation.input.*`, as v0.3 names them."""
    attributes: Attributes = {}
    try:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
    except TypeError:
        # The call itself will raise the same error; record the raw arguments meanwhile.
        for i, value in enumerate(args):
            attributes.update(_value_attributes(f"{_INPUT}.args.{i}", value))
        if kwargs:
            attributes.update(_value_attributes(f"{_INPUT}.kwargs", kwargs))
        return attributes
    for name, value in bound.arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_POSITIONAL:
            for i, item in enumerate(value):
                attributes.update(_value_attributes(f"{_INPUT}.{name}.{i}", item))
        else:
            attributes.update(_value_attributes(f"{_INPUT}.{name}", value))
    return attributes


@overload
def operation(fn: F, *, propagate: bool = True, name: Optional[str] = None, **attributes: Any) -> F: ...
@overload
def operation(
    fn: None = None, *, propagate: bool = True, name: Optional[str] = None, **attributes: Any
) -> OperationContext: ...
def operation(
    fn: Optional[F] = None, *, propagate: bool = True, name: Optional[str] = None, **attributes: Any
) -> Union[F, OperationContext]:
    """Trace an operation: `@operation`, `@operation(category="x")`, or `with operation(user_id=1) as op:`.

    The span is always named `agentlightning.operation`; `name=` sets its `agentlightning.operation.name`
    attribute (ValueError when the attributes set it too). Decorating, the function's name is used otherwise.
    """
    if name is not None:
        if _OPERATION_NAME in attributes:
            raise ValueError(f"operation() got both name= and {_OPERATION_NAME!r}; pass one of them")
        attributes[_OPERATION_NAME] = name
    if fn is not None:
        if not callable(fn):
            raise ValueError(f"operation() takes a function or keyword attributes, got {fn!r}")
        return OperationContext(AGL_OPERATION, attributes, propagate=propagate)(fn)
    return OperationContext(AGL_OPERATION, attributes, propagate=propagate)
