"""A two-turn agent instrumented only with `opentelemetry-instrumentation-openai-v2`, exporting OTLP/HTTP.

Nothing from agentlightning is imported: the OpenTelemetry SDK is configured from the standard variables
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_RESOURCE_ATTRIBUTES` carrying `agentlightning.rollout_id` and
`agentlightning.attempt_id`, `OTEL_SEMCONV_STABILITY_OPT_IN`, `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`),
the OpenAI client from `OPENAI_BASE_URL` / `OPENAI_API_KEY`. The reward is a plain OpenTelemetry span named
`agentlightning.reward` with the attributes `agentlightning.reward.0.name` / `.value`.

Run: `python tests/support/genai_agents/openai_v2_agent.py "<question>" "<expected word>"`.
"""

from __future__ import annotations

import os
import sys

import openai
from opentelemetry import _logs, trace
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor


def main(question: str, expected: str) -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(tracer_provider)
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter()))
    _logs.set_logger_provider(logger_provider)
    OpenAIInstrumentor().instrument()

    client = openai.OpenAI(max_retries=0)
    model = os.environ.get("AGENT_MODEL", "agent-model")
    messages: list[dict[str, str]] = [
        {"role": "system", "content": "Answer in one short sentence."},
        {"role": "user", "content": question},
    ]
    first = client.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "Say it again."},
    ]
    second = client.chat.completions.create(model=model, messages=messages)  # type: ignore[arg-type]
    reward = 1.0 if expected in (second.choices[0].message.content or "") else 0.0
    tracer = trace.get_tracer("genai-agent")
    with tracer.start_as_current_span(
        "agentlightning.reward",
        attributes={"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": reward},
    ):
        pass
    tracer_provider.shutdown()
    logger_provider.shutdown()
    print(f"reward={reward}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
