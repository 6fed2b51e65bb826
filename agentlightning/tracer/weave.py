"""`WeaveTracer`: trace agents written with Weave (`@weave.op`, Weave's LLM integrations), fully offline.

Weave records calls into an in-memory trace server (`agentlightning.instrumentation.weave`), never W&B.
Each finished call becomes one span: name = the op's name, inputs under `agentlightning.operation.input.*`,
output under `agentlightning.operation.output.*` (LLM calls also get `prompt_token_ids` /
`response_token_ids` when the server returned them), parent = the calling op. Spans reach the store
through the same delivery as `OtelTracer` (sequence ids allocated by the store). Calls are routed to the
rollout by a Weave call attribute that `trace_context` sets, so concurrent rollouts stay apart.

Weave is an optional extra (`pip install agentlightning[weave]`); this module is not imported by
`agentlightning.tracer`.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import importlib.util
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Optional

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, TraceFlags
from opentelemetry.trace import StatusCode as OtelStatusCode

from agentlightning.attributes.otel import flatten_attributes, sanitize_attributes
from agentlightning.semconv import (
    PROMPT_TOKEN_IDS,
    RESPONSE_TOKEN_IDS,
    LightningResourceAttributes,
    LightningSpanAttributes,
)
from agentlightning.types import Attributes, Span, SpanCoreFields, TraceStatus

from ._delivery import TraceSession
from .base import Tracer, TraceRequest

if TYPE_CHECKING:
    from agentlightning.instrumentation.weave import InMemoryWeaveTraceServer, WeaveCallRecord
    from agentlightning.store.base import LightningStore

__all__ = ["WeaveTracer", "SESSION_ATTRIBUTE", "weave_call_to_span"]

logger = logging.getLogger(__name__)

SESSION_ATTRIBUTE = "agentlightning.weave_session"
"""Weave call attribute naming the trace context a call belongs to (removed from the converted span)."""

_INSTALL_HINT = "WeaveTracer needs Weave: pip install agentlightning[weave] (or use OtelTracer)"
_OP_NAME = LightningSpanAttributes.OPERATION_NAME.value
_OP_INPUT = LightningSpanAttributes.OPERATION_INPUT.value
_OP_OUTPUT = LightningSpanAttributes.OPERATION_OUTPUT.value
_RESOURCE = Resource.create({LightningResourceAttributes.TRACER_NAME.value: "WeaveTracer"})

_current_session: contextvars.ContextVar[Optional[TraceSession]] = contextvars.ContextVar(
    "agentlightning_weave_session", default=None
)


# ---- Weave call -> span ----


def _id_int(value: str, size: int) -> int:
    """A stable non-zero OpenTelemetry id of `size` bytes for a Weave id (UUIDs keep their bits)."""
    if size == 16:
        try:
            number = uuid.UUID(value).int
        except ValueError:
            number = 0
        if number:
            return number
    number = int(hashlib.blake2b(value.encode("utf-8"), digest_size=size).hexdigest(), 16)
    return number or 1


def _otel_context(trace_id: int, span_id: int) -> SpanContext:
    return SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _seconds_to_ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def _readable_span(
    name: str,
    *,
    trace_id: int,
    span_id: int,
    parent_span_id: Optional[int],
    attributes: Attributes,
    start_time: float,
    end_time: float,
    status: TraceStatus,
) -> ReadableSpan:
    return ReadableSpan(
        name=name,
        context=_otel_context(trace_id, span_id),
        parent=_otel_context(trace_id, parent_span_id) if parent_span_id is not None else None,
        resource=_RESOURCE,
        attributes=attributes,
        kind=SpanKind.INTERNAL,
        status=Status(OtelStatusCode[status.status_code], status.description),
        start_time=_seconds_to_ns(start_time),
        end_time=_seconds_to_ns(end_time),
    )


def _flatten_under(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, (Mapping, list, tuple)):
        return flatten_attributes({prefix: value}, expand_leaf_lists=False)
    return {} if value is None else {prefix: value}


def _int_list(value: Any) -> Optional[list[int]]:
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):  # type: ignore[union-attr]
        return list(value)  # type: ignore[arg-type]
    return None


def _token_id_attributes(output: Any) -> Attributes:
    """vLLM-style token ids of an LLM call's output (top-level `prompt_token_ids`, first choice's `token_ids`)."""
    if not isinstance(output, Mapping):
        return {}
    attributes: Attributes = {}
    choices = output.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) else {}  # type: ignore[index]
    prompt = _int_list(output.get("prompt_token_ids")) or _int_list(first.get("prompt_token_ids"))  # type: ignore[union-attr]
    response = _int_list(first.get("token_ids"))  # type: ignore[union-attr]
    provider_fields = first.get("provider_specific_fields")  # type: ignore[union-attr]
    if response is None and isinstance(provider_fields, Mapping):
        response = _int_list(provider_fields.get("token_ids"))  # type: ignore[union-attr]
    if prompt is not None:
        attributes[PROMPT_TOKEN_IDS] = prompt
    if response is not None:
        attributes[RESPONSE_TOKEN_IDS] = response
    return attributes


def _exception_attributes(exception: str) -> tuple[Attributes, str]:
    """OpenTelemetry exception attributes and a status description from Weave's exception JSON."""
    try:
        data = json.loads(exception)
    except ValueError:
        data = None
    if isinstance(data, Mapping):
        kind = str(data.get("type") or data.get("exc_type") or "Exception")  # type: ignore[union-attr]
        message = str(data.get("message") or data.get("exc_message") or "")  # type: ignore[union-attr]
    else:
        kind, message = "Exception", exception
    return {"exception.type": kind, "exception.message": message}, f"{kind}: {message}"


def weave_call_to_span(record: WeaveCallRecord) -> ReadableSpan:
    """The OpenTelemetry span of one finished Weave call (see the module docstring for the mapping)."""
    attributes: dict[str, Any] = {_OP_NAME: record.short_op_name}
    # Weave's own bookkeeping inputs (e.g. `_weave_stream_start_time`) are not the op's.
    inputs = {key: value for key, value in record.inputs.items() if not str(key).startswith("_weave")}
    attributes.update(_flatten_under(_OP_INPUT, inputs))
    attributes.update(_flatten_under(_OP_OUTPUT, record.output))
    call_attributes = dict(record.attributes)
    call_attributes.pop(SESSION_ATTRIBUTE, None)
    weave_meta = call_attributes.pop("weave", None)
    if call_attributes:
        attributes.update(flatten_attributes(call_attributes, expand_leaf_lists=False))
    if isinstance(weave_meta, Mapping) and weave_meta.get("kind"):  # type: ignore[union-attr]
        attributes["weave.kind"] = str(weave_meta["kind"])  # type: ignore[index]
    attributes.update({"weave.call_id": record.id, "weave.trace_id": record.trace_id, "weave.op_name": record.op_name})
    if record.display_name:
        attributes["weave.display_name"] = record.display_name
    attributes.update(_token_id_attributes(record.output))
    status = TraceStatus(status_code="OK")
    if record.exception:
        exception_attributes, description = _exception_attributes(record.exception)
        attributes.update(exception_attributes)
        status = TraceStatus(status_code="ERROR", description=description)
    trace_id = _id_int(record.trace_id, 16)
    return _readable_span(
        record.short_op_name,
        trace_id=trace_id,
        span_id=_id_int(record.id, 8),
        parent_span_id=_id_int(record.parent_id, 8) if record.parent_id else None,
        attributes=sanitize_attributes(attributes),
        start_time=record.started_at,
        end_time=max(record.ended_at, record.started_at),
        status=status,
    )


def _current_weave_ids() -> tuple[Optional[int], Optional[int]]:
    """(trace id, span id) of the Weave call running in this context, so emitted spans become its children."""
    from weave.trace.context import call_context

    call = call_context.get_current_call()
    if call is None or not getattr(call, "id", None) or not getattr(call, "trace_id", None):
        return None, None
    return _id_int(str(call.trace_id), 16), _id_int(str(call.id), 8)


# ---- the tracer ----


class WeaveTracer(Tracer):
    """Trace Weave ops and Weave-integrated LLM calls into the store, with an in-memory Weave server.

    Args:
        project_name: Weave project (`project` or `entity/project`); only names Weave refs locally.
        weave_user_settings: Weave `UserSettings` fields (e.g. `{"capture_code": False}`); the offline
            ones (no call links, no server cache, no write-ahead log) are always applied.
        instrument_managed: let Weave patch the LLM libraries it integrates with (OpenAI, Anthropic,
            LiteLLM...), so their calls are recorded without `@weave.op`.
    """

    def __init__(
        self,
        *,
        project_name: Optional[str] = None,
        weave_user_settings: Optional[dict[str, Any]] = None,
        instrument_managed: bool = True,
    ) -> None:
        if importlib.util.find_spec("weave") is None:
            raise ImportError(_INSTALL_HINT)
        super().__init__()
        self.project_name = project_name
        self.weave_user_settings = dict(weave_user_settings or {})
        self.instrument_managed = instrument_managed
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._server: Optional[InMemoryWeaveTraceServer] = None
        self._owns_instrumentation = False
        self._sessions: dict[str, TraceSession] = {}
        self._trace_sessions: dict[str, TraceSession] = {}
        self._open: list[TraceSession] = []
        self._last_session: Optional[TraceSession] = None

    # Only configuration travels to runner processes; each sets up its own Weave client and server.
    def __getstate__(self) -> dict[str, Any]:
        keep = ("project_name", "weave_user_settings", "instrument_managed", "worker_id")
        return {key: value for key, value in self.__dict__.items() if key in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._store = None
        self._init_runtime()

    # ---- lifecycle ----

    def init_worker(self, worker_id: int, store: Optional[LightningStore] = None) -> None:  # type: ignore[override]
        super().init_worker(worker_id, store)
        self._ensure_setup()

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        super().teardown_worker(worker_id, *args, **kwargs)
        with self._lock:
            server, owns = self._server, self._owns_instrumentation
            self._server, self._owns_instrumentation = None, False
        if server is not None:
            server.remove_call_listener(self._on_call_finished)
            if owns:
                from agentlightning.instrumentation.weave import uninstrument_weave

                uninstrument_weave()

    @property
    def weave_trace_server(self) -> Optional[InMemoryWeaveTraceServer]:
        return self._server

    def _ensure_setup(self) -> InMemoryWeaveTraceServer:
        with self._lock:
            if self._server is None:
                try:
                    from agentlightning.instrumentation.weave import get_weave_trace_server, instrument_weave
                except ImportError as exc:
                    raise ImportError(_INSTALL_HINT) from exc
                self._owns_instrumentation = get_weave_trace_server() is None
                server = instrument_weave(
                    self.project_name,
                    user_settings=self.weave_user_settings,
                    patch_integrations=self.instrument_managed,
                )
                server.add_call_listener(self._on_call_finished)
                self._server = server
            return self._server

    # ---- routing finished Weave calls ----

    def _session_for(self, record: WeaveCallRecord) -> Optional[TraceSession]:
        key = record.attributes.get(SESSION_ATTRIBUTE)
        with self._lock:
            if isinstance(key, str):
                session = self._sessions.get(key)
                if session is not None:
                    self._trace_sessions[record.trace_id] = session
                return session  # None: its trace context has closed, the call is dropped
            # A call started where the context was lost (e.g. a bare thread): its trace, else the newest context.
            session = self._trace_sessions.get(record.trace_id)
            if session is None and self._open:
                session = self._open[-1]
            return session

    def _on_call_finished(self, record: WeaveCallRecord) -> None:
        session = self._session_for(record)
        if session is not None:
            session.submit(weave_call_to_span(record))

    # ---- tracing ----

    @asynccontextmanager
    async def _open_trace(self, request: TraceRequest) -> AsyncIterator[Any]:
        """Capture the Weave calls (and emitted spans) of the block for one rollout attempt; yields the Weave client."""
        self._ensure_setup()
        import weave

        from agentlightning.instrumentation.weave import get_weave_client, weave_settings

        session = TraceSession(
            owner=self, rollout_id=request.rollout_id, attempt_id=request.attempt_id, store=request.store
        )
        key = uuid.uuid4().hex
        with self._lock:
            self._sessions[key] = session
            self._open = [*self._open, session]
        self._last_session = session
        token = _current_session.set(session)
        logger.debug("weave trace context %r opened for rollout %s", request.name, session.rollout_id)
        try:
            from weave.trace.settings import override_settings

            with weave.attributes({SESSION_ATTRIBUTE: key}), override_settings(**weave_settings()):  # type: ignore[arg-type]
                yield get_weave_client()
        finally:
            _current_session.reset(token)
            try:
                client = get_weave_client()
                if client is not None:
                    # Weave sends call starts/ends from its own threads; wait for this block's calls.
                    await asyncio.to_thread(client.flush)
            finally:
                with self._lock:
                    self._sessions.pop(key, None)
                    self._open = [s for s in self._open if s is not session]
                    for trace_id in [t for t, s in self._trace_sessions.items() if s is session]:
                        del self._trace_sessions[trace_id]
                await session.close()

    def _still_tracing(self) -> bool:
        return bool(self._open)

    def get_last_trace(self) -> list[Span]:
        """Spans of the most recent trace context (as stored, with rollout/attempt/sequence ids)."""
        return self._last_session.get_spans() if self._last_session is not None else []

    # ---- emitters ----

    def _record_core(self, core: SpanCoreFields) -> None:
        # a child of the running Weave call, if any
        session = _current_session.get()
        if session is None:
            with self._lock:
                session = self._open[-1] if self._open else None
        if session is None:
            return
        trace_id, parent_span_id = _current_weave_ids()
        start = core.start_time if core.start_time is not None else time.time()
        session.submit(
            _readable_span(
                core.name,
                trace_id=trace_id if trace_id is not None else uuid.uuid4().int,
                span_id=uuid.uuid4().int >> 64 or 1,
                parent_span_id=parent_span_id,
                attributes=core.attributes,
                start_time=start,
                end_time=core.end_time if core.end_time is not None else start,
                status=core.status,
            )
        )
