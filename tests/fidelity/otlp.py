"""The official OpenTelemetry OpenAI instrumentation in-process, its spans kept in memory.

It records messages as `gen_ai.input.messages` / `gen_ai.output.messages` span attributes only in the
latest GenAI conventions (`OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`, content on spans);
the opt-in is read once per process, so it is re-read here and restored afterwards.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["official_openai_instrumentation"]

_ENV = {
    "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only",
}


def _reread_semconv_opt_in() -> None:
    from opentelemetry.instrumentation._semconv import _OpenTelemetrySemanticConventionStability as stability

    stability._initialized = False  # type: ignore[attr-defined]
    stability._initialize()  # type: ignore[attr-defined]


@contextlib.contextmanager
def official_openai_instrumentation() -> Iterator[InMemorySpanExporter]:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    saved = {name: os.environ.get(name) for name in _ENV}
    os.environ.update(_ENV)
    _reread_semconv_opt_in()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _reread_semconv_opt_in()
