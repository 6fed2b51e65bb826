"""The Tracer contract and the process-wide active tracer."""

from __future__ import annotations

import asyncio
import threading
import warnings
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from agentlightning.types import Attributes, ParallelWorkerBase, Span, SpanCoreFields, SpanRecordingContext, TraceStatus

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
        raise NotImplementedError(f"{type(self).__name__} does not implement trace_context")
        yield  # pragma: no cover

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
        raise NotImplementedError(f"{type(self).__name__} does not implement create_span")

    @contextmanager
    def operation_context(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
    ) -> Iterator[SpanRecordingContext]:
        """Record a span covering the block; the yielded context records attributes, status, exceptions."""
        raise NotImplementedError(f"{type(self).__name__} does not implement operation_context")
        yield  # pragma: no cover

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
