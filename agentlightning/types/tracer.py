"""Span types: our serialisable mirror of OpenTelemetry spans."""

from __future__ import annotations

import functools
import inspect
import json
import secrets
import time
from collections.abc import Sequence
from enum import Enum
from types import FunctionType
from typing import Any, Literal, Optional, Protocol, Union

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import format_span_id, format_trace_id
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AUTO_SEQUENCE_ID",
    "AttributeValue",
    "Attributes",
    "TraceState",
    "SpanContext",
    "TraceStatus",
    "Event",
    "Link",
    "OtelResource",
    "Span",
    "SpanNames",
    "SpanAttributeNames",
    "SpanLike",
    "StatusCode",
    "SpanCoreFields",
    "SpanRecordingContext",
]

AttributeValue = Union[str, bool, int, float, Sequence[str], Sequence[bool], Sequence[int], Sequence[float]]
Attributes = dict[str, AttributeValue]
TraceState = dict[str, str]
StatusCode = Literal["UNSET", "OK", "ERROR"]

AUTO_SEQUENCE_ID = -1
"""The `sequence_id` of a span the store should number: a store gives a span with a negative sequence id the
rollout's next id in the same call (`add_span`, `add_many_spans`, `finish_attempt`, OTLP). Every id from 0 up is
a real id, stored as given (as in v0.3)."""


class SpanNames(str, Enum):
    """Span names written by agentlightning itself."""

    REWARD = "agentlightning.reward"
    MESSAGE = "agentlightning.message"
    OBJECT = "agentlightning.object"
    EXCEPTION = "agentlightning.exception"
    VIRTUAL = "agentlightning.virtual"
    ROLLOUT_ID = "agentlightning.rollout_id"
    ATTEMPT_ID = "agentlightning.attempt_id"
    SPAN_SEQUENCE_ID = "agentlightning.span_sequence_id"


class SpanAttributeNames(str, Enum):
    MESSAGE = "message"
    OBJECT = "object"


class SpanContext(BaseModel):
    trace_id: str
    span_id: str
    is_remote: bool = False
    trace_state: TraceState = Field(default_factory=dict)

    model_config = ConfigDict(extra="allow")


class TraceStatus(BaseModel):
    status_code: StatusCode = "UNSET"
    description: Optional[str] = None

    model_config = ConfigDict(extra="allow")


class Event(BaseModel):
    name: str
    attributes: Attributes = Field(default_factory=dict)
    timestamp: Optional[float] = None

    model_config = ConfigDict(extra="allow")


class Link(BaseModel):
    context: SpanContext
    attributes: Optional[Attributes] = None

    model_config = ConfigDict(extra="allow")


class OtelResource(BaseModel):
    attributes: Attributes = Field(default_factory=dict)
    schema_url: str = ""

    model_config = ConfigDict(extra="allow")


class SpanCoreFields(BaseModel):
    """The fields a caller chooses for a span; ids and context are filled in when it is stored."""

    name: str
    status: TraceStatus = Field(default_factory=TraceStatus)
    attributes: Attributes = Field(default_factory=dict)
    start_time: Optional[float] = None
    end_time: Optional[float] = None


def _ns_to_seconds(value: Optional[float]) -> Optional[float]:
    if value is None:
        return None
    return value / 1e9 if value > 1e12 else float(value)


def _context_from_otel(ctx: Any) -> Optional[SpanContext]:
    if ctx is None:
        return None
    trace_state = dict(ctx.trace_state.items()) if getattr(ctx, "trace_state", None) is not None else {}
    return SpanContext.model_construct(
        trace_id=format_trace_id(ctx.trace_id),
        span_id=format_span_id(ctx.span_id),
        is_remote=bool(ctx.is_remote),
        trace_state=trace_state,
    )


# Public ReadableSpan properties already mapped onto Span fields; the rest become extras.
_MAPPED_OTEL_FIELDS = {
    "name",
    "context",
    "parent",
    "status",
    "attributes",
    "events",
    "links",
    "start_time",
    "end_time",
    "resource",
    "kind",
    "instrumentation_scope",
    "instrumentation_info",
    "dropped_attributes",
    "dropped_events",
    "dropped_links",
}


@functools.lru_cache(maxsize=64)
def _unmapped_class_fields(cls: type) -> tuple[str, ...]:
    """Public non-method members of a ReadableSpan class that have no Span field (computed once per class)."""
    names: list[str] = []
    for attr in dir(cls):
        if attr.startswith("_") or attr in _MAPPED_OTEL_FIELDS:
            continue
        if isinstance(inspect.getattr_static(cls, attr), (FunctionType, classmethod, staticmethod)):
            continue
        names.append(attr)
    return tuple(names)


def _attributes_from_otel(attributes: Any) -> Attributes:
    """OpenTelemetry keeps sequence attributes as tuples; ours are lists, as they are after a JSON round trip."""
    if not attributes:
        return {}
    converted = dict(attributes)
    for key, value in converted.items():
        if isinstance(value, tuple):
            converted[key] = list(value)  # type: ignore[arg-type]
    return converted


class Span(BaseModel):
    """One finished span, tied to a rollout attempt and ordered by `sequence_id`."""

    model_config = ConfigDict(extra="allow")

    rollout_id: str
    attempt_id: str
    sequence_id: int
    trace_id: str
    span_id: str
    parent_id: Optional[str] = None
    name: str
    status: TraceStatus = Field(default_factory=TraceStatus)
    attributes: Attributes = Field(default_factory=dict)
    events: list[Event] = Field(default_factory=list)
    links: list[Link] = Field(default_factory=list)
    start_time: Optional[float] = None
    end_time: Optional[float] = None
    context: Optional[SpanContext] = None
    parent: Optional[SpanContext] = None
    resource: OtelResource = Field(default_factory=OtelResource)

    @classmethod
    def from_opentelemetry(cls, src: ReadableSpan, rollout_id: str, attempt_id: str, sequence_id: int) -> Span:
        """Convert an OpenTelemetry SDK span; timestamps in ns are converted to seconds."""
        ctx = src.context
        parent = src.parent
        extras: dict[str, Any] = {}
        instance_fields = [k for k in getattr(src, "__dict__", {}) if not k.startswith("_")]
        for attr in (*_unmapped_class_fields(type(src)), *instance_fields):
            if attr in _MAPPED_OTEL_FIELDS:
                continue
            try:
                value = getattr(src, attr)
            except Exception:
                continue
            if callable(value):
                continue
            try:
                extras[attr] = json.loads(json.dumps(value, default=str))
            except (TypeError, ValueError):
                continue
        resource = src.resource
        # The SDK already guarantees these types; skipping validation halves the cost of the tracer hot path.
        return cls.model_construct(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=sequence_id,
            trace_id=format_trace_id(ctx.trace_id) if ctx is not None else format_trace_id(0),
            span_id=format_span_id(ctx.span_id) if ctx is not None else format_span_id(0),
            parent_id=format_span_id(parent.span_id) if parent is not None else None,
            name=src.name,
            status=TraceStatus.model_construct(
                status_code=src.status.status_code.name, description=src.status.description
            ),
            attributes=_attributes_from_otel(src.attributes),
            events=[
                Event.model_construct(
                    name=e.name, attributes=_attributes_from_otel(e.attributes), timestamp=_ns_to_seconds(e.timestamp)
                )
                for e in src.events
            ],
            links=[
                Link.model_construct(context=_context_from_otel(link.context), attributes=dict(link.attributes or {}))  # type: ignore[arg-type]
                for link in src.links
                if link.context is not None
            ],
            start_time=_ns_to_seconds(src.start_time),
            end_time=_ns_to_seconds(src.end_time),
            context=_context_from_otel(ctx),
            parent=_context_from_otel(parent),
            resource=OtelResource.model_construct(
                attributes=dict(resource.attributes) if resource is not None else {},
                schema_url=(resource.schema_url or "") if resource is not None else "",
            ),
            **extras,
        )

    @classmethod
    def from_attributes(
        cls,
        *,
        attributes: Optional[Attributes] = None,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
        sequence_id: Optional[int] = None,
        trace_id: Optional[str] = None,
        span_id: Optional[str] = None,
        parent_id: Optional[str] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
        resource: Optional[OtelResource] = None,
        name: Optional[str] = None,
        status: Optional[TraceStatus] = None,
    ) -> Span:
        """Build a span from attributes alone, with fresh random ids."""
        trace_id = trace_id or secrets.token_hex(16)
        span_id = span_id or secrets.token_hex(8)
        return cls(
            rollout_id=rollout_id or "",
            attempt_id=attempt_id or "",
            sequence_id=sequence_id or 0,
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            name=name or SpanNames.VIRTUAL.value,
            status=status or TraceStatus(status_code="OK"),
            attributes=dict(attributes or {}),
            start_time=start_time,
            end_time=end_time,
            context=SpanContext(trace_id=trace_id, span_id=span_id),
            parent=SpanContext(trace_id=trace_id, span_id=parent_id) if parent_id else None,
            resource=resource or OtelResource(),
        )

    @classmethod
    def from_core_fields(
        cls,
        core: SpanCoreFields,
        *,
        rollout_id: str,
        attempt_id: str,
        sequence_id: int,
        trace_id: Optional[str] = None,
        span_id: Optional[str] = None,
        parent_id: Optional[str] = None,
        resource: Optional[OtelResource] = None,
    ) -> Span:
        """Turn caller-chosen core fields into a storable span."""
        start = core.start_time if core.start_time is not None else time.time()
        end = core.end_time if core.end_time is not None else start
        return cls.from_attributes(
            attributes=core.attributes,
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=sequence_id,
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            start_time=start,
            end_time=end,
            resource=resource,
            name=core.name,
            status=core.status,
        )


SpanLike = Union[ReadableSpan, Span]


class SpanRecordingContext(Protocol):
    """What `Tracer.operation_context` yields: record onto the span while it is open."""

    def record_exception(self, exception: BaseException) -> None: ...

    def record_attributes(self, attributes: Attributes) -> None: ...

    def record_status(self, status_code: StatusCode, description: Optional[str] = None) -> None: ...

    def get_recorded_span(self) -> SpanCoreFields: ...
