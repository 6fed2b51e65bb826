"""`SpanRecordingContext` implementations: one over a live OpenTelemetry span, one over plain core fields."""

from __future__ import annotations

import time
from typing import Optional

from opentelemetry.trace import Span as OtelSpan
from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode as OtelStatusCode

from agentlightning.attributes.otel import format_exception_attributes, sanitize_attributes
from agentlightning.types import Attributes, SpanCoreFields, StatusCode, TraceStatus

__all__ = ["OtelSpanRecordingContext", "CoreFieldsRecordingContext", "seconds_to_ns"]


def seconds_to_ns(seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else int(seconds * 1_000_000_000)


class OtelSpanRecordingContext:
    """Records onto an open OpenTelemetry span and remembers what it recorded."""

    def __init__(self, span: OtelSpan, name: str, attributes: Attributes, start_time: float) -> None:
        self._span = span
        self._core = SpanCoreFields(name=name, attributes=dict(attributes), start_time=start_time)

    def record_exception(self, exception: BaseException) -> None:
        attributes = format_exception_attributes(exception)
        self._span.record_exception(exception)
        self._span.set_attributes(attributes)
        self._core.attributes.update(attributes)
        self.record_status("ERROR", f"{type(exception).__name__}: {exception}")

    def record_attributes(self, attributes: Attributes) -> None:
        clean = sanitize_attributes(attributes)
        self._span.set_attributes(clean)
        self._core.attributes.update(clean)

    def record_status(self, status_code: StatusCode, description: Optional[str] = None) -> None:
        self._span.set_status(Status(OtelStatusCode[status_code], description if status_code == "ERROR" else None))
        self._core.status = TraceStatus(status_code=status_code, description=description)

    def get_recorded_span(self) -> SpanCoreFields:
        return self._core.model_copy(deep=True)

    def finish(self, end_time: Optional[float] = None) -> None:
        end = end_time if end_time is not None else time.time()
        self._core.end_time = end
        self._span.end(end_time=seconds_to_ns(end))


class CoreFieldsRecordingContext:
    """Records into `SpanCoreFields` only; used where no tracing backend exists."""

    def __init__(self, name: str, attributes: Attributes, start_time: float) -> None:
        self._core = SpanCoreFields(name=name, attributes=dict(attributes), start_time=start_time)

    def record_exception(self, exception: BaseException) -> None:
        self._core.attributes.update(format_exception_attributes(exception))
        self.record_status("ERROR", f"{type(exception).__name__}: {exception}")

    def record_attributes(self, attributes: Attributes) -> None:
        self._core.attributes.update(sanitize_attributes(attributes))

    def record_status(self, status_code: StatusCode, description: Optional[str] = None) -> None:
        self._core.status = TraceStatus(status_code=status_code, description=description)

    def get_recorded_span(self) -> SpanCoreFields:
        return self._core.model_copy(deep=True)

    def finish(self, end_time: Optional[float] = None) -> None:
        self._core.end_time = end_time if end_time is not None else time.time()
