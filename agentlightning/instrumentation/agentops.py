"""Make AgentOps work offline: its exporters and API calls are bypassed unless the service is enabled.

AgentOps normally authenticates against api.agentops.ai, exports spans and metrics over OTLP to
otlp.agentops.ai and uploads log files when a root span ends. Agent-lightning only needs the spans it
creates locally (the `LightningSpanProcessor` reads them from the provider), so by default every one of
those network paths is replaced by a no-op. `enable_agentops_service(True)` restores the real service.

LLM token ids do not need a patch of AgentOps' attribute handlers: agent-lightning's own OpenAI
instrumentation (installed after AgentOps') owns the `openai.chat.completion` span, and when AgentOps'
wrapper runs first it enriches AgentOps' span instead of opening a second one. AgentOps may instrument the
OpenAI client again later, from its import hook (e.g. after it mistook `openai.types.beta.agents` for the
OpenAI Agents SDK and dropped its provider instrumentations); each time it does, ours is put back on top,
so AgentOps' wrapper never sees a call first (it fails on `openai.omit` arguments of `.stream()`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, Callable, Optional

try:
    import agentops  # noqa: F401
    import agentops.instrumentation as agentops_instrumentation
    from agentops.client.api.base import BaseApiClient
    from agentops.client.api.versions.v3 import V3Client
    from agentops.client.api.versions.v4 import V4Client
    from agentops.sdk import core as agentops_core
    from agentops.sdk.exporters import AuthenticatedOTLPExporter
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "agentlightning.instrumentation.agentops needs AgentOps: pip install agentlightning[agentops]"
    ) from exc

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

__all__ = [
    "instrument_agentops",
    "uninstrument_agentops",
    "enable_agentops_service",
    "is_agentops_service_enabled",
    "BypassableOTLPMetricExporter",
]

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_service_enabled = False
_originals: dict[tuple[Any, str], Any] = {}


def enable_agentops_service(enabled: bool = True) -> None:
    """Let AgentOps reach its cloud service again (True) or keep it fully offline (False, the default)."""
    global _service_enabled
    _service_enabled = enabled


def is_agentops_service_enabled() -> bool:
    return _service_enabled


class BypassableOTLPMetricExporter(OTLPMetricExporter):
    """AgentOps' metric exporter, silent while the service is disabled."""

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        if not _service_enabled:
            return MetricExportResult.SUCCESS
        return super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)


def _bypass(owner: Any, name: str, offline: Callable[..., Any]) -> None:
    """Replace `owner.name` by a function that calls `offline` while the service is disabled."""
    key = (owner, name)
    if key in _originals:
        return
    original = owner.__dict__[name]
    _originals[key] = original

    if _is_coroutine_function(original):

        async def async_patched(*args: Any, **kwargs: Any) -> Any:
            if _service_enabled:
                return await original(*args, **kwargs)
            return offline(*args, **kwargs)

        setattr(owner, name, async_patched)
    else:

        def patched(*args: Any, **kwargs: Any) -> Any:
            if _service_enabled:
                return original(*args, **kwargs)
            return offline(*args, **kwargs)

        setattr(owner, name, patched)


def _is_coroutine_function(func: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(func)


def _skip_span_export(self: Any, spans: Sequence[ReadableSpan]) -> SpanExportResult:
    return SpanExportResult.SUCCESS


def _no_response(*args: Any, **kwargs: Any) -> Optional[dict[str, Any]]:
    return None


def _empty_upload(*args: Any, **kwargs: Any) -> dict[str, Any]:
    return {}


def _restore_openai_wrapper_on_top() -> None:
    """Put our OpenAI (and Anthropic, when in use) wrappers back on top of what AgentOps just wrapped."""
    import sys

    from .openai import instrument_openai, is_openai_instrumented

    if is_openai_instrumented():
        instrument_openai()
    if "anthropic" in sys.modules and "agentlightning.instrumentation.anthropic" in sys.modules:
        from .anthropic import instrument_anthropic, is_anthropic_instrumented

        if is_anthropic_instrumented():
            instrument_anthropic()


def _keep_openai_wrapper_outermost() -> None:
    """After every lazy instrumentation by AgentOps' import hook, re-wrap the OpenAI client on top of it."""
    module = agentops_instrumentation
    original = getattr(module, "_perform_instrumentation", None)
    key = (module, "_perform_instrumentation")
    if original is None or key in _originals:
        return
    _originals[key] = original

    def perform_instrumentation(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:
            try:
                _restore_openai_wrapper_on_top()
            except Exception:
                logger.exception("could not put the OpenAI instrumentation back on top of AgentOps'")

    module._perform_instrumentation = perform_instrumentation  # type: ignore[attr-defined]


def instrument_agentops() -> bool:
    """Bypass AgentOps' network calls (idempotent); call before `agentops.init()` to cover its exporters."""
    with _lock:
        _keep_openai_wrapper_outermost()
        _bypass(AuthenticatedOTLPExporter, "export", _skip_span_export)
        _bypass(V3Client, "fetch_auth_token", _no_response)
        _bypass(BaseApiClient, "async_request", _no_response)
        _bypass(V4Client, "upload_object", _empty_upload)
        _bypass(V4Client, "upload_logfile", _empty_upload)
        key = (agentops_core, "OTLPMetricExporter")
        if key not in _originals:
            _originals[key] = agentops_core.OTLPMetricExporter  # type: ignore[attr-defined]
            agentops_core.OTLPMetricExporter = BypassableOTLPMetricExporter  # type: ignore[attr-defined]
    return True


def uninstrument_agentops() -> None:
    """Restore AgentOps' original network behaviour."""
    with _lock:
        for (owner, name), original in _originals.items():
            setattr(owner, name, original)
        _originals.clear()
