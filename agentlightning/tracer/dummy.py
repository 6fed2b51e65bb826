"""`DummyTracer`: no backend and no store; spans are only built as `SpanCoreFields`."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Optional

from agentlightning.types import Span, SpanCoreFields, TraceStatus

from ._delivery import DUMMY_ATTEMPT_ID, DUMMY_ROLLOUT_ID
from .base import Tracer, TraceRequest, _check_trace_ids  # pyright: ignore[reportPrivateUsage]

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

    def _trace_store(
        self, store: Optional[LightningStore], rollout_id: Optional[str], attempt_id: Optional[str]
    ) -> Optional[LightningStore]:
        _check_trace_ids(rollout_id, attempt_id)
        return None  # writes to no store: `store=` and `init_worker`'s store are ignored

    @asynccontextmanager
    async def _open_trace(self, request: TraceRequest) -> AsyncIterator[DummyTracer]:
        recorded: list[SpanCoreFields] = []
        with self._lock:
            self._recording = recorded
        try:
            yield self
        finally:
            with self._lock:
                self._recording = None
            self._last = [
                Span.from_core_fields(
                    core,
                    rollout_id=request.rollout_id or DUMMY_ROLLOUT_ID,
                    attempt_id=request.attempt_id or DUMMY_ATTEMPT_ID,
                    sequence_id=i,
                )
                for i, core in enumerate(recorded, start=1)
            ]

    def get_last_trace(self) -> list[Span]:
        return list(self._last)

    def _default_status(self) -> TraceStatus:
        return TraceStatus(status_code="OK")  # a recorded fact, not an operation in progress (v0.3)

    def _record_core(self, core: SpanCoreFields) -> None:
        with self._lock:
            if self._recording is not None:
                self._recording.append(core)
