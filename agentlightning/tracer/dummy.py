"""`DummyTracer`: no backend and no store; spans are only built as `SpanCoreFields`."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Optional

from agentlightning.attributes.otel import sanitize_attributes
from agentlightning.types import Attributes, Span, SpanCoreFields, SpanRecordingContext, TraceStatus

from ._delivery import DUMMY_ATTEMPT_ID, DUMMY_ROLLOUT_ID
from ._recording import CoreFieldsRecordingContext
from .base import Tracer, clear_active_tracer, get_active_tracer, replace_active_tracer

if TYPE_CHECKING:
    from agentlightning.store.base import LightningStore

__all__ = ["DummyTracer"]


class DummyTracer(Tracer):
    """A tracer that records nothing anywhere: emitters with `propagate=False` use it to build span fields.

    Inside `trace_context` it remembers the core fields it built, so `get_last_trace()` returns them as
    spans with dummy ids (or the ids given to the context); nothing is written to a store.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._recording: Optional[list[SpanCoreFields]] = None
        self._last: list[Span] = []

    def _remember(self, core: SpanCoreFields) -> None:
        with self._lock:
            if self._recording is not None:
                self._recording.append(core)

    @asynccontextmanager
    async def trace_context(
        self,
        name: Optional[str] = None,
        *,
        store: Optional[LightningStore] = None,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
    ) -> AsyncIterator[DummyTracer]:
        if (rollout_id is None) != (attempt_id is None):
            raise ValueError(
                f"rollout_id and attempt_id must be given together (got rollout_id={rollout_id!r}, "
                f"attempt_id={attempt_id!r})"
            )
        recorded: list[SpanCoreFields] = []
        with self._lock:
            self._recording = recorded
        previous = get_active_tracer()
        replace_active_tracer(self)
        try:
            yield self
        finally:
            with self._lock:
                self._recording = None
            self._last = [
                Span.from_core_fields(
                    core,
                    rollout_id=rollout_id or DUMMY_ROLLOUT_ID,
                    attempt_id=attempt_id or DUMMY_ATTEMPT_ID,
                    sequence_id=i,
                )
                for i, core in enumerate(recorded, start=1)
            ]
            if previous is not None and previous is not self:
                replace_active_tracer(previous)
            else:
                clear_active_tracer()

    def get_last_trace(self) -> list[Span]:
        return list(self._last)

    def create_span(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        timestamp: Optional[float] = None,
        status: Optional[TraceStatus] = None,
    ) -> SpanCoreFields:
        moment = timestamp if timestamp is not None else time.time()
        core = SpanCoreFields(
            name=name,
            attributes=sanitize_attributes(attributes) if attributes else {},
            status=status or TraceStatus(status_code="OK"),  # a recorded fact, not an operation in progress
            start_time=moment,
            end_time=moment,
        )
        self._remember(core)
        return core

    @contextmanager
    def operation_context(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
    ) -> Iterator[SpanRecordingContext]:
        recording = CoreFieldsRecordingContext(
            name, sanitize_attributes(attributes) if attributes else {}, start_time or time.time()
        )
        try:
            yield recording
        except Exception as exc:
            recording.record_exception(exc)
            raise
        finally:
            recording.finish(end_time)
            self._remember(recording.get_recorded_span())
