"""Delivery of finished OpenTelemetry spans to a store: one `TraceSession` per open trace context.

Span processors run synchronously in whatever thread ends a span, while stores are async. A session
therefore only appends the span to a pending list (the hot path) and, `SPAN_BATCH_DELAY_SECONDS` later,
a drain task writes whole batches with one `add_many_spans` call each (spans go without a sequence id,
so the store allocates them in the same call: one round trip per batch over HTTP). The drain runs either
on the event loop that opened the context (stores that are not thread-safe) or on a private event-loop
thread (thread-safe stores), so spans keep flowing even while synchronous agent code blocks the caller's
loop. Closing a session writes everything still pending at once, from the caller's loop; batches never
overlap, so they reach the store (and get their sequence ids) in order. A session closed with
`keep_pending=True` writes nothing more by itself: its owner sends the last batch together with the
attempt's final status (`finish_attempt`, one request over HTTP) or alone (`flush`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
from collections.abc import Coroutine, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan

from agentlightning.semconv import LightningResourceAttributes
from agentlightning.types import AUTO_SEQUENCE_ID, Span

if TYPE_CHECKING:
    from agentlightning.store.base import LightningStore
    from agentlightning.types import AttemptStatus, FinishedAttempt

__all__ = [
    "STORE_WRITE_TIMEOUT_SECONDS",
    "SPAN_BATCH_DELAY_SECONDS",
    "DUMMY_ROLLOUT_ID",
    "DUMMY_ATTEMPT_ID",
    "TraceSession",
    "current_session",
    "suppress_session",
]

logger = logging.getLogger(__name__)

STORE_WRITE_TIMEOUT_SECONDS = 10.0
# How long a finished span may wait for others to share its write; a closing context flushes at once.
SPAN_BATCH_DELAY_SECONDS = 0.05
DUMMY_ROLLOUT_ID = "rollout-dummy"
DUMMY_ATTEMPT_ID = "attempt-dummy"

T = TypeVar("T")

# The session spans created in this context belong to. `_SUPPRESSED` marks our own delivery code, whose
# spans (e.g. an instrumented HTTP client talking to a remote store) must never be captured.
_SUPPRESSED: Any = object()
_current_session: contextvars.ContextVar[Any] = contextvars.ContextVar("agentlightning_trace_session", default=None)
# The key OpenTelemetry instrumentations check before creating spans.
_SUPPRESS_KEY = otel_context._SUPPRESS_INSTRUMENTATION_KEY  # type: ignore[attr-defined]


def current_session() -> Optional[TraceSession]:
    """The session opened by the innermost enclosing trace context of this task/thread, if any."""
    session = _current_session.get()
    return None if session is _SUPPRESSED else session


def suppress_session() -> contextvars.Token[Any]:
    """Mark the current context as agentlightning's own plumbing (its spans are ignored)."""
    return _current_session.set(_SUPPRESSED)


def is_suppressed() -> bool:
    return _current_session.get() is _SUPPRESSED


class _LoopThread:
    """A daemon thread running an event loop, shared by all sessions writing to thread-safe stores."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._pid: Optional[int] = None

    def get_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            # After a fork the thread is gone in the child; start a fresh one.
            if self._loop is None or self._pid != os.getpid() or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    _current_session.set(_SUPPRESSED)
                    otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))
                    loop.call_soon(ready.set)
                    loop.run_forever()

                threading.Thread(target=run, name="agentlightning-span-delivery", daemon=True).start()
                ready.wait()
                self._loop = loop
                self._pid = os.getpid()
            return self._loop


_delivery_thread = _LoopThread()


class TraceSession:
    """The spans of one `trace_context`: routing ids, pending spans and what reached the store."""

    def __init__(
        self,
        *,
        owner: Any,
        rollout_id: Optional[str],
        attempt_id: Optional[str],
        store: Optional[LightningStore],
        write_timeout: float = STORE_WRITE_TIMEOUT_SECONDS,
    ) -> None:
        self.owner = owner
        self.rollout_id = rollout_id or DUMMY_ROLLOUT_ID
        self.attempt_id = attempt_id or DUMMY_ATTEMPT_ID
        self.store = store if rollout_id is not None else None
        self._write_timeout = write_timeout
        self._lock = threading.Lock()
        self._pending: list[ReadableSpan] = []
        self._scheduled = False  # a timer or drain will pick pending spans up
        self._writing = False  # a batch is being written (by the drain or by close); batches go one at a time
        self._closed = False
        self._keeping = False  # closed with keep_pending: only `flush` / `finish_attempt` write what is left
        self._spans: list[Span] = []
        self._local_sequence = 0
        self._drain_task: Optional[asyncio.Future[None]] = None
        self._timer: Optional[asyncio.TimerHandle] = None
        self._warned = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread_id: Optional[int] = None
        if self.store is not None:
            caller_loop = _running_loop()
            if self.store.capabilities.get("thread_safe", False) or caller_loop is None:
                # Opened from synchronous code (LightningSpanProcessor.with_context), there is no caller
                # loop to write from: the delivery thread writes, as v0.3's processor did from its own loop.
                self._loop = _delivery_thread.get_loop()
            else:
                self._loop = caller_loop
                self._loop_thread_id = threading.get_ident()

    # ---- hot path (any thread) ----

    def submit(self, span: ReadableSpan) -> None:
        """Queue a finished span; cheap enough to call from a span processor's `on_end`."""
        with self._lock:
            self._pending.append(span)
            if self._scheduled or self._loop is None:
                return
            self._scheduled = True
        loop = self._loop
        try:
            if threading.get_ident() == self._loop_thread_id:
                self._arm_timer()
            else:
                loop.call_soon_threadsafe(self._arm_timer)
        except RuntimeError:
            # The loop is closed; `close()` (or get_spans) still finds the span in the pending list.
            logger.debug("delivery loop closed; span %s stays pending", span.name)

    # ---- delivery (on the session's delivery loop) ----

    def _arm_timer(self) -> None:
        if self._timer is None and self._loop is not None:
            self._timer = self._loop.call_later(SPAN_BATCH_DELAY_SECONDS, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._start_drain()

    def _start_drain(self) -> None:
        if self._drain_task is not None and not self._drain_task.done():
            return  # the running drain takes new spans too
        with self._lock:
            if self._writing or not self._pending:
                self._scheduled = False  # nothing to do, or `close()` is writing and takes the rest
                return
        token = _current_session.set(_SUPPRESSED)
        try:
            self._drain_task = asyncio.ensure_future(self._drain())
        finally:
            _current_session.reset(token)

    async def _drain(self) -> None:
        with _suppressed():
            while True:
                batch = self._take_batch(unschedule=True)
                if batch is None:
                    return
                await self._write_taken(batch)

    def _take_batch(self, *, unschedule: bool = False) -> Optional[list[ReadableSpan]]:
        """Everything pending, when no other batch is being written (the taker must `_write_taken` it).

        With `unschedule` (the drain), finding nothing to take also clears `_scheduled` under the same
        lock, so a span submitted meanwhile arms a new timer instead of being stranded.
        """
        with self._lock:
            if self._writing or not self._pending or (unschedule and self._keeping):
                if unschedule:
                    self._scheduled = False
                return None
            batch, self._pending = self._pending, []
            self._writing = True
            return batch

    async def _write_taken(self, batch: list[ReadableSpan]) -> None:
        try:
            await self._write(batch)
        finally:
            with self._lock:
                self._writing = False

    async def _write(self, batch: list[ReadableSpan]) -> None:
        store = self.store
        assert store is not None
        rollout_id, attempt_id = self.rollout_id, self.attempt_id
        # AUTO_SEQUENCE_ID: the store numbers the batch itself, in order, within the same call.
        spans = [self._to_span(item, AUTO_SEQUENCE_ID) for item in batch]
        try:
            stored = await asyncio.wait_for(store.add_many_spans(spans), self._write_timeout)
        except Exception as exc:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "could not write %d span(s) of rollout %r attempt %r to %s (%s: %s); they are kept only in "
                    "tracer.get_last_trace(). Is the rollout known to this store?",
                    len(batch),
                    rollout_id,
                    attempt_id,
                    type(store).__name__,
                    type(exc).__name__,
                    exc,
                )
            stored = []
        if len(stored) == len(spans) and all(s.sequence_id >= 0 for s in stored):
            self._spans.extend(stored)
        else:
            self._spans.extend(self._convert_locally(item) for item in batch)

    def keep_locally(self, span: ReadableSpan) -> None:
        """Record a finished span in this trace without writing it to the store."""
        with self._lock:
            self._spans.append(self._convert_locally(span))

    def _to_span(self, span: ReadableSpan, sequence_id: int) -> Span:
        """The stored form of a finished span. With a store, its resource names the rollout and attempt
        (`agentlightning.rollout_id` / `agentlightning.attempt_id`), as v0.3's OTLP export sets them."""
        converted = Span.from_opentelemetry(span, self.rollout_id, self.attempt_id, sequence_id)
        if self.store is not None:
            converted.resource.attributes[LightningResourceAttributes.ROLLOUT_ID.value] = self.rollout_id
            converted.resource.attributes[LightningResourceAttributes.ATTEMPT_ID.value] = self.attempt_id
        return converted

    def _convert_locally(self, span: ReadableSpan) -> Span:
        if self._spans:
            self._local_sequence = max(self._local_sequence, self._spans[-1].sequence_id)
        self._local_sequence += 1
        return self._to_span(span, self._local_sequence)

    async def _drain_finished(self) -> None:
        task = self._drain_task
        if task is not None and not task.done():
            await task

    # ---- flush and read back (caller side) ----

    async def close(self, *, keep_pending: bool = False) -> None:
        """Flush every pending span to the store (or, without a store, convert them locally).

        The last batch is written from the caller's loop (the store is safe to call from there), which
        saves two hops to the delivery thread per trace; only a batch the drain is still writing is
        waited for on the delivery loop, so batches reach the store in order. With `keep_pending` the
        spans not yet written stay here (the drain stops taking them) for `finish_attempt` or `flush`.
        """
        self._closed = True
        if self._loop is None:
            self.close_locally()
            return
        if keep_pending:
            with self._lock:
                self._keeping = True
        if self._loop_thread_id is not None and self._timer is not None:
            self._timer.cancel()  # on the caller's own loop: this flush writes what the timer would have
            self._timer = None
            with self._lock:
                self._scheduled = False  # a span ending after the close arms a new timer
        await self._write_pending(take=not keep_pending)

    def close_locally(self) -> None:
        """`close()` of a session without a store: convert the pending spans (synchronous, nothing to write)."""
        if self._loop is not None:
            raise RuntimeError(f"the trace of rollout {self.rollout_id!r} writes to a store; await close() instead")
        self._closed = True
        with self._lock:
            batch, self._pending = self._pending, []
        self._spans.extend(self._convert_locally(item) for item in batch)

    @property
    def delivery_loop(self) -> Optional[asyncio.AbstractEventLoop]:
        """The loop spans are written from (None without a store)."""
        return self._loop

    @property
    def writes_from_caller_loop(self) -> bool:
        """Whether spans are written from the loop that opened the session (a store that is not thread-safe)."""
        return self._loop_thread_id is not None

    async def flush(self) -> None:
        """Write the spans a `close(keep_pending=True)` kept, on their own (no status)."""
        with self._lock:
            self._keeping = False
        if self._loop is not None:
            await self._write_pending(take=True)

    async def finish_attempt(self, status: AttemptStatus, extra: Sequence[Span] = ()) -> FinishedAttempt:
        """Write the kept spans, then `extra`, and the attempt's final `status` in one `store.finish_attempt` call.

        `extra` (spans of this attempt that are not part of the trace, e.g. the runner's exception span)
        is stored after the trace's spans and not added to the trace. Raises what the store raises (e.g.
        `StaleAttemptError`); the trace's spans are then kept as converted locally, as a failed write keeps them.
        """
        store = self.store
        if store is None:
            raise RuntimeError(f"trace of rollout {self.rollout_id!r} has no store to finish its attempt in")
        with self._lock:
            self._keeping = True  # the drain takes nothing more
        if self._loop is not None:
            await self._write_pending(take=False)  # a batch still in flight goes first, in order
        with self._lock:
            batch, self._pending = self._pending, []
            self._keeping = False
        spans = [self._to_span(item, AUTO_SEQUENCE_ID) for item in batch]
        try:
            with _suppressed():
                finished = await store.finish_attempt(self.rollout_id, self.attempt_id, status, [*spans, *extra])
        except BaseException:
            self._spans.extend(self._convert_locally(item) for item in batch)
            raise
        traced = finished.spans[: len(spans)]
        if len(finished.spans) == len(spans) + len(extra) and all(s.sequence_id >= 0 for s in traced):
            self._spans.extend(traced)
        else:
            self._spans.extend(self._convert_locally(item) for item in batch)
        return finished

    async def _write_pending(self, *, take: bool) -> None:
        """Write pending batches until none is left (`take`), or only wait for the batch in flight."""
        assert self._loop is not None
        while True:
            taken = self._take_batch() if take else None
            if taken is not None:
                with _suppressed():
                    await self._write_taken(taken)
                continue
            with self._lock:
                if not self._writing:
                    return  # nothing pending (or not taking), nothing in flight
            if self._loop_thread_id is not None:
                await self._drain_finished()
            else:
                await _await_on_loop(self._drain_finished(), self._loop)

    def get_spans(self) -> list[Span]:
        """Spans delivered so far plus, while the session is open, pending ones converted locally.

        Pending spans have provisional sequence ids (what the store would most likely assign next).
        """
        with self._lock:
            pending = list(self._pending)
        spans = list(self._spans)
        if not pending:
            return spans
        sequence = max((s.sequence_id for s in spans), default=self._local_sequence)
        for offset, item in enumerate(pending, start=1):
            spans.append(self._to_span(item, sequence + offset))
        return spans


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@contextlib.contextmanager
def _suppressed() -> Iterator[None]:
    """Our own store calls (e.g. through an instrumented HTTP client) must not become spans of any trace."""
    session_token = _current_session.set(_SUPPRESSED)
    ctx_token = otel_context.attach(otel_context.set_value(_SUPPRESS_KEY, True))
    try:
        yield
    finally:
        otel_context.detach(ctx_token)
        _current_session.reset(session_token)


async def _await_on_loop(coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> T:
    """Run `coro` on another thread's loop and await its result from the current loop."""
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    return await asyncio.wrap_future(future)
