"""A LangChain callback handler that records chains and tools as OpenTelemetry spans.

LLM calls are not recorded here: LangChain's OpenAI chat models call the `openai` client, whose own
instrumentation records each call with its token ids. Chain spans give those calls an agent:
`langchain.chain.type` holds the run name (`Runnable.with_config(run_name=...)`, a LangGraph node
name...), which adapters read as the agent name for `agent_match`. Chain and tool spans are made the
current span while they run, so LLM calls made inside them become their children.

LangChain ends async runs in a copy of the caller's context (its callbacks are shielded tasks), so the
context a run was made current in cannot always be restored. The current span is therefore a
`_RunSpan`: the run's span while it runs, and once it ended, whatever was current before it, so spans
started later in that context are never parented under a finished chain.

Needs LangChain (`pip install agentlightning[langchain]`); import it only through
`OtelTracer.get_langchain_handler()`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional
from uuid import UUID

from opentelemetry import context as otel_context
from opentelemetry import trace as trace_api
from opentelemetry.trace import Status, StatusCode

from agentlightning.attributes.otel import format_exception_attributes
from agentlightning.types import Attributes

try:
    from langchain_core.callbacks import BaseCallbackHandler
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the agent-lightning LangChain handler needs LangChain: pip install agentlightning[langchain]"
    ) from exc

__all__ = [
    "CHAIN_SPAN_NAME",
    "TOOL_SPAN_NAME",
    "CHAIN_TYPE_ATTRIBUTE",
    "LightningCallbackHandler",
]

logger = logging.getLogger(__name__)

CHAIN_SPAN_NAME = "langchain.chain"
TOOL_SPAN_NAME = "langchain.tool"
CHAIN_TYPE_ATTRIBUTE = "langchain.chain.type"
HIDDEN_TAG = "langsmith:hidden"
MAX_TEXT_LENGTH = 4096
"""Tool inputs/outputs longer than this are truncated on the span."""


class _RunSpan(trace_api.Span):
    """The current span during a LangChain run: the run's span until it ends, then the span before it."""

    def __init__(self, span: trace_api.Span, previous: trace_api.Span) -> None:
        self.span = span
        self.previous = previous
        self.ended = False

    @property
    def _target(self) -> trace_api.Span:
        return self.previous if self.ended else self.span

    def get_span_context(self) -> trace_api.SpanContext:
        return self._target.get_span_context()

    def is_recording(self) -> bool:
        return self._target.is_recording()

    def end(self, end_time: Optional[int] = None) -> None:
        self.span.end(end_time)

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self._target.set_attributes(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        self._target.set_attribute(key, value)

    def add_event(self, name: str, attributes: Any = None, timestamp: Optional[int] = None) -> None:
        self._target.add_event(name, attributes, timestamp)

    def update_name(self, name: str) -> None:
        self._target.update_name(name)

    def set_status(self, status: Any, description: Optional[str] = None) -> None:
        self._target.set_status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Any = None,
        timestamp: Optional[int] = None,
        escaped: bool = False,
    ) -> None:
        self._target.record_exception(exception, attributes, timestamp, escaped)


@dataclass
class _Run:
    name: str
    current: _RunSpan
    token: object

    @property
    def span(self) -> trace_api.Span:
        return self.current.span


def _truncate(value: Any) -> str:
    text = value if isinstance(value, str) else _to_json(value)
    return text if len(text) <= MAX_TEXT_LENGTH else text[:MAX_TEXT_LENGTH] + "...(truncated)"


def _to_json(value: Any) -> str:
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


def _run_name(serialized: Optional[Mapping[str, Any]], kwargs: Mapping[str, Any], default: str) -> str:
    """LangChain passes the run name as `name`; older callers only fill `serialized`."""
    name = kwargs.get("name")
    if isinstance(name, str) and name:
        return name
    if serialized:
        name = serialized.get("name")
        if isinstance(name, str) and name:
            return name
        ids = serialized.get("id")
        if isinstance(ids, Sequence) and ids and isinstance(ids[-1], str):
            return ids[-1]
    return default


def _detach(token: object) -> bool:
    """Detach quietly; False when the run ends in another context than it started in (then nothing to undo)."""
    try:
        otel_context._RUNTIME_CONTEXT.detach(token)  # type: ignore[attr-defined, arg-type]
    except (ValueError, RuntimeError):
        return False
    return True


class LightningCallbackHandler(BaseCallbackHandler):
    """Records each LangChain chain run as a `langchain.chain` span and each tool run as a `langchain.tool` span.

    Pass it in the run config (`chain.invoke(x, config={"callbacks": [handler]})`) inside a tracer's
    `trace_context`. It runs inline (also for async runs) so that the span it makes current is seen
    by the code of the run.
    """

    run_inline = True
    raise_error = False

    def __init__(self, tracer: trace_api.Tracer) -> None:
        super().__init__()
        self._tracer = tracer
        self._runs: dict[UUID, _Run] = {}
        self._lock = threading.Lock()

    # ---- span bookkeeping ----

    def _start(
        self, name: str, run_name: str, attributes: Attributes, run_id: UUID, parent_run_id: Optional[UUID]
    ) -> None:
        with self._lock:
            parent = self._runs.get(parent_run_id) if parent_run_id is not None else None
        # The parent's stand-in, not its span: if this run's context outlives both, it resolves further up.
        context = trace_api.set_span_in_context(parent.current) if parent is not None else None
        span = self._tracer.start_span(name, context=context, attributes=attributes)
        current = _RunSpan(span, trace_api.get_current_span(context))
        token = otel_context.attach(trace_api.set_span_in_context(current, context))
        with self._lock:
            self._runs[run_id] = _Run(name=run_name, current=current, token=token)

    def _end(
        self, run_id: UUID, attributes: Optional[Attributes] = None, error: Optional[BaseException] = None
    ) -> None:
        with self._lock:
            run = self._runs.pop(run_id, None)
        if run is None:
            return
        try:
            if attributes:
                run.span.set_attributes(attributes)
            if error is not None:
                run.span.record_exception(error)
                run.span.set_attributes(format_exception_attributes(error))
                run.span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        finally:
            run.current.ended = True
            run.span.end()
            if trace_api.get_current_span() is run.current:
                _detach(run.token)

    # ---- chains ----

    def on_chain_start(
        self,
        serialized: Optional[dict[str, Any]],
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: Optional[UUID] = None,
        tags: Optional[list[str]] = None,
        metadata: Optional[dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:
        if tags and HIDDEN_TAG in tags:
            return  # LangGraph plumbing (channel writes, branches): its children attach to the run above
        chain_type = _run_name(serialized, kwargs, "chain")
        attributes: Attributes = {CHAIN_TYPE_ATTRIBUTE: chain_type, "langchain.run_id": str(run_id)}
        if tags:
            attributes["langchain.tags"] = [str(tag) for tag in tags]
        node = (metadata or {}).get("langgraph_node")
        if isinstance(node, str):
            attributes["langgraph.node"] = node
        self._start(CHAIN_SPAN_NAME, chain_type, attributes, run_id, parent_run_id)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error=error)

    def on_agent_action(self, action: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Legacy agent executors: the chain run choosing actions is the agent."""
        with self._lock:
            run = self._runs.get(run_id)
        if run is not None:
            run.span.set_attribute("agent.name", run.name)
            run.span.add_event("langchain.agent_action", {"tool.name": str(getattr(action, "tool", ""))})

    # ---- tools ----

    def on_tool_start(
        self,
        serialized: Optional[dict[str, Any]],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: Optional[UUID] = None,
        tags: Optional[list[str]] = None,
        metadata: Optional[dict[str, Any]] = None,
        inputs: Optional[dict[str, Any]] = None,
        **kwargs: Any,
    ) -> None:
        tool_name = _run_name(serialized, kwargs, "tool")
        attributes: Attributes = {
            "tool.name": tool_name,
            "langchain.run_id": str(run_id),
            "langchain.tool.input": _truncate(inputs if inputs is not None else input_str),
        }
        self._start(TOOL_SPAN_NAME, tool_name, attributes, run_id, parent_run_id)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        content = getattr(output, "content", output)
        self._end(run_id, {"langchain.tool.output": _truncate(content)})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._end(run_id, error=error)
