"""`OtelTracer`: an OpenTelemetry SDK tracer whose finished spans flow into the LightningStore."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import ExitStack, asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Optional

from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode as OtelStatusCode

from agentlightning.attributes.otel import sanitize_attributes
from agentlightning.semconv import LightningResourceAttributes
from agentlightning.types import (
    AttemptStatus,
    Attributes,
    FinishedAttempt,
    Span,
    SpanCoreFields,
    SpanRecordingContext,
    TraceStatus,
)

from ._delivery import (
    DUMMY_ATTEMPT_ID,
    DUMMY_ROLLOUT_ID,
    STORE_WRITE_TIMEOUT_SECONDS,
    TraceSession,
    is_suppressed,
)
from ._delivery import _current_session as _session_var
from ._recording import OtelSpanRecordingContext, seconds_to_ns
from .base import Tracer, TraceRequest

if TYPE_CHECKING:
    from agentlightning.store.base import LightningStore

__all__ = [
    "OtelTracer",
    "LightningSpanProcessor",
    "ProcessorTraceContext",
    "STORE_WRITE_TIMEOUT_SECONDS",
    "DUMMY_ROLLOUT_ID",
    "DUMMY_ATTEMPT_ID",
]

logger = logging.getLogger(__name__)


class LightningSpanProcessor(SpanProcessor):
    """Routes each finished span to the trace session it was started under.

    A span belongs to the session current in the context that started it (trace contexts set it in a
    context variable, so concurrent rollouts in different tasks stay apart). Spans started where no
    session is current, e.g. in a thread the agent spawned, fall back to the most recently opened
    session of this processor. A span it did not see start (started before any session opened, or given
    to `on_end` directly) belongs to the session current where it ends; outside every session it is ignored.
    """

    def __init__(self, disable_store_submission: bool = False) -> None:
        self._lock = threading.Lock()
        self._open: list[TraceSession] = []
        self._span_sessions: dict[int, TraceSession] = {}
        self._shutdown = False
        self._disable_store_submission = disable_store_submission
        self._last: Optional[TraceSession] = None
        self._entered: list[ProcessorTraceContext] = []

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(disable_store_submission={self.disable_store_submission}, "
            f"store={self.store!r}, rollout_id={self.rollout_id!r}, attempt_id={self.attempt_id!r})"
        )

    # ---- v0.3's view: the innermost open trace context ----

    @property
    def disable_store_submission(self) -> bool:
        """When True, finished spans are kept in the trace (`spans()`, `get_last_trace()`) but not written."""
        return self._disable_store_submission

    @disable_store_submission.setter
    def disable_store_submission(self, value: bool) -> None:
        self._disable_store_submission = bool(value)

    def _current(self) -> Optional[TraceSession]:
        current = _session_var.get()
        if isinstance(current, TraceSession) and current.owner is self:
            return current
        return self._open[-1] if self._open else None

    @property
    def store(self) -> Optional[LightningStore]:
        """The store spans of the open trace context go to (None outside one, or when tracing locally)."""
        session = self._current()
        return session.store if session is not None else None

    @property
    def rollout_id(self) -> Optional[str]:
        session = self._current()
        return session.rollout_id if session is not None and session.store is not None else None

    @property
    def attempt_id(self) -> Optional[str]:
        session = self._current()
        return session.attempt_id if session is not None and session.store is not None else None

    def spans(self) -> list[Span]:
        """Spans of the open trace context, or of the last one when none is open."""
        session = self._current() or self._last
        return session.get_spans() if session is not None else []

    # ---- v0.3's way to open a trace without a tracer ----

    def with_context(self, store: LightningStore, rollout_id: str, attempt_id: str) -> ProcessorTraceContext:
        """A context manager routing the spans that end inside it to `store`, for `rollout_id` / `attempt_id`.

        `with processor.with_context(store=..., rollout_id=..., attempt_id=...) as processor:` (v0.3); entering
        returns the processor and starts a fresh `spans()` list. Leaving writes what is still pending and
        waits for it, except in a `with` (not `async with`) inside a running event loop with a store that is
        not thread-safe: the last spans are then written once that loop runs again (use `async with`).
        """
        if store is None:  # pyright: ignore[reportUnnecessaryComparison]
            raise ValueError("with_context(store=...) needs a LightningStore; use `with processor:` to trace locally")
        for field_name, value in (("rollout_id", rollout_id), ("attempt_id", attempt_id)):
            if not isinstance(value, str) or not value:  # pyright: ignore[reportUnnecessaryIsInstance]
                raise ValueError(f"with_context({field_name}=...) must be a non-empty string, got {value!r}")
        return ProcessorTraceContext(self, store, rollout_id, attempt_id)

    def __enter__(self) -> LightningSpanProcessor:
        """`with processor:` opens a local trace (no store, as v0.3): `spans()` collects what ends inside."""
        context = ProcessorTraceContext(self, None, None, None)
        self._entered.append(context)
        return context.__enter__()

    def __exit__(self, *exc_info: Any) -> None:
        if self._entered:
            self._entered.pop().__exit__(*exc_info)

    def open_session(self, session: TraceSession) -> None:
        with self._lock:
            self._open = [*self._open, session]
            self._last = session

    def close_session(self, session: TraceSession) -> None:
        """Stop routing spans to `session`; spans still open now are dropped when they end."""
        with self._lock:
            self._open = [s for s in self._open if s is not session]
            for span_id in [k for k, v in list(self._span_sessions.items()) if v is session]:
                del self._span_sessions[span_id]

    @property
    def open_sessions(self) -> list[TraceSession]:
        return list(self._open)

    def on_start(self, span: Any, parent_context: Optional[otel_context.Context] = None) -> None:
        open_sessions = self._open
        if not open_sessions:
            return
        session = _session_var.get()
        if session is None:
            session = open_sessions[-1]
        elif is_suppressed() or session.owner is not self:
            return
        ctx = span.context
        if ctx is None or not ctx.trace_flags.sampled:
            return
        self._span_sessions[ctx.span_id] = session

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None or not ctx.trace_flags.sampled:
            return
        session = self._span_sessions.pop(ctx.span_id, None) if self._span_sessions else None
        if session is None:
            # Not seen starting (started before the trace opened, or handed to `on_end` directly as v0.3
            # allowed): it belongs to the trace current where it ends, unless that is another tracer's.
            current = _session_var.get()
            if not self._open or is_suppressed() or (current is not None and current.owner is not self):
                return
            session = self._current()
            if session is None:
                return
        if self._disable_store_submission:
            session.keep_locally(span)
        else:
            session.submit(span)

    def shutdown(self) -> None:
        self._shutdown = True
        with self._lock:
            self._open = []
            self._span_sessions.clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class ProcessorTraceContext:
    """One trace opened on a `LightningSpanProcessor` directly (`with_context(...)`, or `with processor:`)."""

    def __init__(
        self,
        processor: LightningSpanProcessor,
        store: Optional[LightningStore],
        rollout_id: Optional[str],
        attempt_id: Optional[str],
    ) -> None:
        self.processor = processor
        self.store, self.rollout_id, self.attempt_id = store, rollout_id, attempt_id
        self._session: Optional[TraceSession] = None
        self._token: Optional[contextvars.Token[Any]] = None
        self._closing: Optional[asyncio.Future[None]] = None

    def __enter__(self) -> LightningSpanProcessor:
        if self._session is not None:
            raise RuntimeError("this trace context is already open; call with_context(...) again for a new trace")
        session = TraceSession(
            owner=self.processor, rollout_id=self.rollout_id, attempt_id=self.attempt_id, store=self.store
        )
        self.processor.open_session(session)
        self._session, self._token = session, _session_var.set(session)
        return self.processor

    def _leave(self) -> TraceSession:
        session, token = self._session, self._token
        if session is None or token is None:
            raise RuntimeError("this trace context is not open")
        self._session = self._token = None
        _reset_session_var(token)
        self.processor.close_session(session)
        return session

    def __exit__(self, *exc_info: Any) -> None:
        session = self._leave()
        loop = session.delivery_loop
        if loop is None:
            session.close_locally()
        elif session.writes_from_caller_loop:
            self._closing = asyncio.ensure_future(session.close(), loop=loop)  # written when the loop runs again
        else:
            asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=STORE_WRITE_TIMEOUT_SECONDS + 5)

    async def wait_closed(self) -> None:
        """Wait until the spans of a context left with `with` inside a running loop are written."""
        if self._closing is not None:
            await self._closing

    async def __aenter__(self) -> LightningSpanProcessor:
        return self.__enter__()

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._leave().close()


def _attach_processor(provider: TracerProvider, processor: SpanProcessor) -> None:
    provider.add_span_processor(processor)


def _detach_processor(provider: TracerProvider, processor: SpanProcessor) -> None:
    """Remove a processor from an SDK provider (the SDK has no public API for it)."""
    multi = getattr(provider, "_active_span_processor", None)
    lock = getattr(multi, "_lock", None)
    processors = getattr(multi, "_span_processors", None)
    if multi is None or lock is None or processors is None:
        return
    with lock:
        multi._span_processors = tuple(p for p in processors if p is not processor)  # type: ignore[union-attr]


class OtelTracer(Tracer):
    """Trace agents with the OpenTelemetry SDK and write every finished span to the store.

    On setup it uses the global SDK `TracerProvider` (installing its own as the global one when none is
    set, so third-party instrumentations feed it too) and attaches a `LightningSpanProcessor`. The OpenAI
    client is auto-instrumented, so chat completions become `openai.chat.completion` spans without code
    changes.
    """

    def __init__(self, *, instrument_openai: bool = True) -> None:
        super().__init__()
        self.instrument_openai = instrument_openai
        self._provider: Optional[TracerProvider] = None
        self._processor: Optional[LightningSpanProcessor] = None
        self._otel_tracer: Optional[trace_api.Tracer] = None
        self._last_session: Optional[TraceSession] = None
        self._setup_lock = threading.Lock()

    # Tracers travel to runner processes, which call init_worker(worker_id, store) again: only
    # configuration is pickled, never the provider, the sessions or the store.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_provider", "_processor", "_otel_tracer", "_last_session", "_setup_lock", "_store"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._store = None
        self._provider = None
        self._processor = None
        self._otel_tracer = None
        self._last_session = None
        self._setup_lock = threading.Lock()

    # ---- lifecycle ----

    def init_worker(self, worker_id: int, store: Optional[LightningStore] = None) -> None:  # type: ignore[override]
        super().init_worker(worker_id, store)
        self._ensure_setup()

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        super().teardown_worker(worker_id, *args, **kwargs)
        with self._setup_lock:
            if self._provider is not None and self._processor is not None:
                self._processor.shutdown()
                _detach_processor(self._provider, self._processor)
            self._processor = None
            self._otel_tracer = None
            self._provider = None

    @property
    def tracer_provider(self) -> Optional[TracerProvider]:
        return self._provider

    @property
    def span_processor(self) -> Optional[LightningSpanProcessor]:
        return self._processor

    def _resolve_provider(self) -> TracerProvider:
        current = trace_api.get_tracer_provider()
        if isinstance(current, TracerProvider):
            return current
        provider = TracerProvider(
            resource=Resource.create({LightningResourceAttributes.TRACER_NAME.value: type(self).__name__})
        )
        if isinstance(current, trace_api.ProxyTracerProvider):
            trace_api.set_tracer_provider(provider)
        else:
            logger.warning(
                "the global OpenTelemetry tracer provider is %s, not an SDK TracerProvider; %s uses a private "
                "provider, so spans of third-party instrumentations will not be captured",
                type(current).__name__,
                type(self).__name__,
            )
        return provider

    def _ensure_setup(self) -> trace_api.Tracer:
        with self._setup_lock:
            if self._otel_tracer is None:
                provider = self._resolve_provider()
                processor = LightningSpanProcessor()
                _attach_processor(provider, processor)
                self._provider, self._processor = provider, processor
                self._otel_tracer = provider.get_tracer("agentlightning.tracer")
                self._instrument()
            return self._otel_tracer

    def _instrument(self) -> None:
        """Install auto-instrumentation; subclasses add their own."""
        if self.instrument_openai:
            self._instrument_openai_client()

    @staticmethod
    def _instrument_openai_client() -> None:
        """The OpenAI client (chat + Responses), and Anthropic / LiteLLM once imported."""
        from agentlightning.instrumentation import instrument_llm_clients
        from agentlightning.instrumentation.openai_clients import install_safe_client_finalizers

        instrument_llm_clients()
        install_safe_client_finalizers()

    # ---- tracing ----

    @asynccontextmanager
    async def trace_context(
        self,
        name: Optional[str] = None,
        *,
        store: Optional[LightningStore] = None,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
        defer_last_batch: bool = False,
    ) -> AsyncIterator[trace_api.Tracer]:
        """Capture spans of the block for one rollout attempt; yields the OpenTelemetry tracer.

        With `defer_last_batch`, leaving the block writes nothing: the spans not yet in the store wait for
        `finish_last_trace(status)`, which sends them with the attempt's final status (one request to a
        remote store instead of two), or `flush_last_trace()`, which sends them alone. One of the two must
        follow, or those spans never reach the store.
        """
        store = self._trace_store(store, rollout_id, attempt_id)
        async with self._activated_trace(TraceRequest(name, store, rollout_id, attempt_id, defer_last_batch)) as otel:
            yield otel

    @asynccontextmanager
    async def _open_trace(self, request: TraceRequest) -> AsyncIterator[trace_api.Tracer]:
        otel_tracer = self._ensure_setup()
        if self.instrument_openai:
            # Cheap, and keeps our wrapper outermost if another library wrapped the client since setup.
            self._instrument_openai_client()
        processor = self._processor
        assert processor is not None
        session = TraceSession(
            owner=processor, rollout_id=request.rollout_id, attempt_id=request.attempt_id, store=request.store
        )
        processor.open_session(session)
        token = _session_var.set(session)
        self._last_session = session
        logger.debug(
            "trace context %r opened for rollout %s attempt %s", request.name, session.rollout_id, session.attempt_id
        )
        capture = ExitStack()
        if not self.instrument_openai:
            # The client patches are process-wide: another tracer may have installed them earlier.
            from agentlightning.instrumentation.llm_calls import without_client_capture

            capture.enter_context(without_client_capture())
        try:
            with capture:
                yield otel_tracer
        finally:
            _reset_session_var(token)
            processor.close_session(session)
            await session.close(keep_pending=request.defer_last_batch and request.rollout_id is not None)

    def _still_tracing(self) -> bool:
        return self._processor is not None and bool(self._processor.open_sessions)

    async def flush_last_trace(self) -> None:
        """Write the spans a `trace_context(defer_last_batch=True)` left unwritten (no-op when none are left)."""
        if self._last_session is not None:
            await self._last_session.flush()

    async def finish_last_trace(self, status: AttemptStatus, spans: Sequence[Span] = ()) -> FinishedAttempt:
        """Write the last trace's deferred spans and its attempt's final `status` in one store call.

        `spans` of the same attempt that are not part of the trace (the runner's exception span) go in the
        same call, after the trace's. Raises what `LightningStore.finish_attempt` raises (e.g. `StaleAttemptError`).
        """
        session = self._last_session
        if session is None or session.store is None:
            raise RuntimeError(
                "finish_last_trace() needs a finished trace_context(rollout_id=..., attempt_id=...) with a store"
            )
        return await session.finish_attempt(status, spans)

    def get_langchain_handler(self) -> Any:
        """A LangChain callback handler recording chains/tools as spans of this tracer (needs LangChain).

        Chain spans carry `langchain.chain.type` (the run name), so adapters' `agent_match` can select the
        LLM calls made inside a named chain; the LLM calls themselves come from the OpenAI instrumentation.
        """
        otel_tracer = self._otel_tracer or self._ensure_setup()
        from .langchain import LightningCallbackHandler

        return LightningCallbackHandler(otel_tracer)

    def get_last_trace(self) -> list[Span]:
        """Spans of the most recent trace context (as stored, with rollout/attempt/sequence ids)."""
        return self._last_session.get_spans() if self._last_session is not None else []

    def _record_core(self, core: SpanCoreFields) -> None:
        """`create_span`'s instant span, as an OpenTelemetry span started and ended at its moment."""
        otel_tracer = self._otel_tracer or self._ensure_setup()
        moment_ns = seconds_to_ns(core.start_time if core.start_time is not None else time.time())
        span = otel_tracer.start_span(core.name, attributes=core.attributes, start_time=moment_ns)
        if core.status != TraceStatus():
            span.set_status(Status(OtelStatusCode[core.status.status_code], core.status.description))
        span.end(end_time=moment_ns)

    @contextmanager
    def operation_context(
        self,
        name: str,
        attributes: Optional[Attributes] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
    ) -> Iterator[SpanRecordingContext]:
        otel_tracer = self._otel_tracer or self._ensure_setup()
        start = start_time if start_time is not None else time.time()
        clean = sanitize_attributes(attributes) if attributes else {}
        span = otel_tracer.start_span(name, attributes=clean, start_time=seconds_to_ns(start))
        recording = OtelSpanRecordingContext(span, name, clean, start)
        try:
            with trace_api.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                yield recording
        except Exception as exc:
            recording.record_exception(exc)
            raise
        finally:
            recording.finish(end_time)


def _reset_session_var(token: contextvars.Token[Any]) -> None:
    try:
        _session_var.reset(token)
    except ValueError:
        # Exited from another context than the one that entered (e.g. a generator finalised elsewhere).
        _session_var.set(token.old_value if token.old_value is not contextvars.Token.MISSING else None)
