"""`AgentOpsTracer`: the OtelTracer plus AgentOps' instrumentation of agent frameworks, fully offline.

AgentOps is an optional extra (`pip install agentlightning[agentops]`); this module imports it only when
a tracer is set up, so importing `agentlightning.tracer` never requires it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Optional

from opentelemetry import trace as trace_api
from opentelemetry.sdk.trace import TracerProvider

from .base import TraceRequest
from .otel import LightningSpanProcessor, OtelTracer, _attach_processor, _detach_processor

__all__ = ["AgentOpsTracer", "LightningSpanProcessor"]

logger = logging.getLogger(__name__)

_INSTALL_HINT = "AgentOpsTracer needs AgentOps: pip install agentlightning[agentops] (or use OtelTracer)"


def _import_agentops() -> Any:
    try:
        import agentops
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return agentops


class AgentOpsTracer(OtelTracer):
    """Trace with AgentOps' instrumentations (LangChain, CrewAI, AutoGen, ...) without its cloud service.

    Args:
        agentops_managed: initialise AgentOps ourselves (`AGENTOPS_API_KEY` defaults to "dummy", no session
            is auto-started, exporters and API calls are bypassed). False when you call `agentops.init()`.
        instrument_managed: install agent-lightning's instrumentations (`instrument_all()`).
        daemon: kept for signature compatibility with the reference (it ran a local AgentOps server as a
            daemon process); nothing runs out of process here.
    """

    def __init__(self, *, agentops_managed: bool = True, instrument_managed: bool = True, daemon: bool = True) -> None:
        _import_agentops()
        super().__init__(instrument_openai=instrument_managed)
        self.agentops_managed = agentops_managed
        self.instrument_managed = instrument_managed
        self.daemon = daemon
        self._extra_provider: Optional[TracerProvider] = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_extra_provider", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._extra_provider = None

    def _resolve_provider(self) -> TracerProvider:
        if self.agentops_managed:
            self._init_agentops()
        return super()._resolve_provider()

    def _init_agentops(self) -> None:
        agentops = _import_agentops()
        from agentlightning.instrumentation.agentops import instrument_agentops

        # Bypass before init: AgentOps builds its exporters inside init().
        instrument_agentops()
        os.environ.setdefault("AGENTOPS_API_KEY", "dummy")
        if not agentops.get_client().initialized:
            agentops.init(auto_start_session=False, log_level="CRITICAL")

    def _instrument(self) -> None:
        if self.instrument_managed:
            from agentlightning.instrumentation import instrument_all

            instrument_all()
        self._attach_to_agentops_provider()

    def _attach_to_agentops_provider(self) -> None:
        """AgentOps instruments libraries against its own provider; make sure our processor sees those spans."""
        from agentops.sdk.core import tracer as agentops_tracing

        provider = agentops_tracing.provider
        processor = self._processor
        if isinstance(provider, TracerProvider) and processor is not None and provider is not self._provider:
            _attach_processor(provider, processor)
            self._extra_provider = provider

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        if self._extra_provider is not None and self._processor is not None:
            _detach_processor(self._extra_provider, self._processor)
        self._extra_provider = None
        super().teardown_worker(worker_id, *args, **kwargs)

    @asynccontextmanager
    async def _open_trace(self, request: TraceRequest) -> AsyncIterator[trace_api.Tracer]:
        """OtelTracer's trace around an AgentOps trace, as v0.3.

        The AgentOps trace (named after the context, else the rollout id) is started inside the trace, so
        its `<trace name>.session` span is recorded beside the agent's spans; it ends with status ERROR
        when the block raises.
        """
        async with super()._open_trace(request) as otel_tracer:
            with self._agentops_trace(request.name if request.name is not None else request.rollout_id):
                yield otel_tracer

    @contextmanager
    def _agentops_trace(self, trace_name: Optional[str]) -> Iterator[None]:
        agentops = _import_agentops()
        if not agentops.get_client().initialized:
            yield  # AgentOps was left to the user (agentops_managed=False) and is not initialised
            return
        trace = agentops.start_trace(trace_name=trace_name) if trace_name else agentops.start_trace()
        # A string, so the span keeps it (v0.3 passed a StatusCode, which OpenTelemetry drops as an attribute).
        status = "Success"
        try:
            yield
        except BaseException:
            status = "Error"
            raise
        finally:
            if trace is not None:
                agentops.end_trace(trace, end_state=status)

    def get_langchain_handler(self, tags: Optional[list[str]] = None) -> Any:  # type: ignore[override]
        """AgentOps' LangChain callback handler (needs langchain installed), feeding this tracer's spans."""
        self._ensure_setup()
        try:
            from agentops.integration.callbacks.langchain import LangchainCallbackHandler
        except ImportError as exc:
            raise ImportError(
                "the AgentOps LangChain handler needs LangChain: pip install agentlightning[langchain]"
            ) from exc
        return LangchainCallbackHandler(api_key=os.environ.get("AGENTOPS_API_KEY", "dummy"), tags=tags)

    get_langchain_callback_handler = get_langchain_handler  # v0.3's alias
