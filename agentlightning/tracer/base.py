"""The Tracer contract and the process-wide active tracer."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from agentlightning.attributes.otel import sanitize_attributes
from agentlightning.types import Attributes, ParallelWorkerBase, Span, SpanCoreFields, SpanRecordingContext, TraceStatus

from ._recording import CoreFieldsRecordingContext

if TYPE_CHECKING:
    from agentlightning.store.base import LightningStore

__all__ = ["Tracer", "get_active_tracer", "set_active_tracer", "clear_active_tracer"]

T = TypeVar("T")

_active_tracer: Optional[Tracer] = None
_active_lock = threading.Lock()


def get_active_tracer() -> Optional[Tracer]:
    """The tracer whose `trace_context` is currently open in this process, if any."""
    return _active_tracer


def set_active_tracer(tracer: Tracer) -> None:
    """Make `tracer` the process's active tracer.

    Raises ValueError when another tracer is active (call `clear_active_tracer()` first); setting the
    active tracer again is a no-op.
    """
    global _active_tracer
    with _active_lock:
        if _active_tracer is not None and _active_tracer is not tracer:
            raise ValueError(
                f"another tracer ({type(_active_tracer).__name__}) is already active; "
                "call clear_active_tracer() before activating a new one"
            )
        _active_tracer = tracer


def replace_active_tracer(tracer: Optional[Tracer]) -> Optional[Tracer]:
    """Make `tracer` active whatever was active before, and return the previous one (for restoring it).

    For tracers' own trace contexts, which nest (e.g. a dummy tracer inside an OpenTelemetry one) and put
    the outer tracer back when they close; user code calls `set_active_tracer`.
    """
    global _active_tracer
    with _active_lock:
        previous, _active_tracer = _active_tracer, tracer
    return previous


def clear_active_tracer() -> None:
    global _active_tracer
    with _active_lock:
        _active_tracer = None


class Tracer(ParallelWorkerBase):
    """Captures what an agent does as spans and delivers them to a store.

    Lifecycle: `init()` once per process, `init_worker(worker_id, store)` per runner worker, then one
    `trace_context(...)` per rollout attempt. Emitters find the tracer through `get_active_tracer()`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._store: Optional[LightningStore] = None

    def init_worker(self, worker_id: int, store: Optional[LightningStore] = None) -> None:  # type: ignore[override]
        super().init_worker(worker_id)
        self._store = store

    @property
    def store(self) -> Optional[LightningStore]:
        return self._store

    @asynccontextmanager
    async def trace_context(
        self,
        name: Optional[str] = None,
        *,
        store: Optional[LightningStore] = None,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
    ) -> AsyncIterator[Any]:
        """Trace everything inside the block as part of one rollout attempt; the tracer is active meanwhile."""
        request = TraceRequest(name, self._trace_store(store, rollout_id, attempt_id), rollout_id, attempt_id)
        async with self._activated_trace(request) as handle:
            yield handle

    @asynccontextmanager
    async def _activated_trace(self, request: TraceRequest) -> AsyncIterator[Any]:
        """`_open_trace(request)` with this tracer active inside; the previous one is back once it has closed."""
        previous: Optional[Tracer] = None
        swapped = False
        try:
            async with self._open_trace(request) as handle:
                previous, swapped = replace_active_tracer(self), True
                yield handle
        finally:
            if swapped:
                self._restore_active(previous, still_open=self._still_tracing())

    def _open_trace(self, request: TraceRequest) -> AbstractAsyncContextManager[Any]:
        """A tracer's own part of `trace_context`: open one trace for `request`, yield what the block gets,
        and close the trace (delivering its spans) when the block leaves."""
        raise NotImplementedError(f"{type(self).__name__} does not implement trace_context")

    def _still_tracing(self) -> bool:
        """Whether another trace context of this tracer is still open (it then stays active)."""
        return False

    def get_last_trace(self) -> list[Span]:
        """Spans captured by the most recent `trace_context`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement get_last_trace")

    def create_span(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        timestamp: Optional[float] = None,
        status: Optional[TraceStatus] = None,
    ) -> SpanCoreFields:
        """Record an instant span (start == end) and return its core fields."""
        moment = timestamp if timestamp is not None else time.time()
        core = SpanCoreFields(
            name=name,
            attributes=sanitize_attributes(attributes) if attributes else {},
            status=status or self._default_status(),
            start_time=moment,
            end_time=moment,
        )
        self._record_core(core)
        return core

    @contextmanager
    def operation_context(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
    ) -> Iterator[SpanRecordingContext]:
        """Record a span covering the block; the yielded context records attributes, status, exceptions."""
        start = start_time if start_time is not None else time.time()
        recording = CoreFieldsRecordingContext(name, sanitize_attributes(attributes) if attributes else {}, start)
        recording.record_status(self._default_status().status_code)
        try:
            yield recording
        except Exception as exc:
            recording.record_exception(exc)
            raise
        finally:
            recording.finish(end_time)
            self._record_core(recording.get_recorded_span())

    def _default_status(self) -> TraceStatus:
        """The status of a span that recorded none (UNSET; a tracer without a backend says OK, as v0.3)."""
        return TraceStatus()

    def _record_core(self, core: SpanCoreFields) -> None:
        """Keep a finished span built by `create_span` / `operation_context` (the tracer's backend)."""
        raise NotImplementedError(f"{type(self).__name__} does not record spans")

    def _trace_store(
        self, store: Optional[LightningStore], rollout_id: Optional[str], attempt_id: Optional[str]
    ) -> Optional[LightningStore]:
        """The store a `trace_context` writes to, after checking its arguments (`store=` is deprecated)."""
        if store is not None:
            warnings.warn(
                "trace_context(store=...) is deprecated; pass the store to init_worker(worker_id, store)",
                DeprecationWarning,
                stacklevel=4,
            )
        _check_trace_ids(rollout_id, attempt_id)
        store = store or self._store
        if rollout_id is not None and store is None:
            raise ValueError(f"tracing rollout {rollout_id!r} needs a store; call init_worker(worker_id, store) first")
        return store

    def _restore_active(self, previous: Optional[Tracer], still_open: bool = False) -> None:
        """At the end of a trace context: the tracer active before it again, else none (unless one is still open)."""
        if previous is not None and previous is not self:
            replace_active_tracer(previous)
        elif not still_open:
            clear_active_tracer()

    def get_langchain_handler(self) -> Any:
        """A LangChain callback handler feeding this tracer, or None when the tracer has none."""
        return None

    @contextmanager
    def lifespan(self, store: Optional[LightningStore] = None) -> Iterator[Tracer]:
        """Run `init`/`init_worker` and `teardown_worker`/`teardown` around a block, for scripts and tests."""
        self.init()
        self.init_worker(0, store)
        try:
            yield self
        finally:
            self.teardown_worker(0)
            self.teardown()

    def trace_run(self, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Deprecated: run a sync function inside a local trace context (no rollout ids) and return its result."""
        warnings.warn(
            "Tracer.trace_run is deprecated; use `async with tracer.trace_context(...)`",
            DeprecationWarning,
            stacklevel=2,
        )
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("trace_run cannot be used inside a running event loop; use trace_run_async")

        async def run() -> T:
            async with self.trace_context(name=getattr(func, "__name__", None)):
                return func(*args, **kwargs)

        return asyncio.run(run())

    async def trace_run_async(self, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        """Deprecated: await a coroutine function inside a local trace context and return its result."""
        warnings.warn(
            "Tracer.trace_run_async is deprecated; use `async with tracer.trace_context(...)`",
            DeprecationWarning,
            stacklevel=2,
        )
        async with self.trace_context(name=getattr(func, "__name__", None)):
            return await func(*args, **kwargs)


@dataclass(frozen=True)
class TraceRequest:
    """What one `trace_context` was asked for: its name, the store it writes to, the attempt's ids."""

    name: Optional[str]
    store: Optional[LightningStore]
    rollout_id: Optional[str]
    attempt_id: Optional[str]
    #: Leave the last spans for `finish_last_trace` / `flush_last_trace` (tracers that defer: `OtelTracer`).
    defer_last_batch: bool = False


def _check_trace_ids(rollout_id: Optional[str], attempt_id: Optional[str]) -> None:
    if (rollout_id is None) != (attempt_id is None):
        raise ValueError(
            f"rollout_id and attempt_id must be given together (got rollout_id={rollout_id!r}, "
            f"attempt_id={attempt_id!r}); pass both to record into the store, or neither to trace locally"
        )
