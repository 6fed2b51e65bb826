// A two-turn agent instrumented only with @opentelemetry/sdk-node + @opentelemetry/instrumentation-openai.
//
// Nothing from agentlightning: the SDK reads the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_RESOURCE_ATTRIBUTES with agentlightning.rollout_id / agentlightning.attempt_id,
// OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT), the OpenAI client OPENAI_BASE_URL / OPENAI_API_KEY.
// Messages travel as OTLP log events; the reward is a plain span named `agentlightning.reward`.
//
// Run: node agent.cjs "<question>" "<expected word>"   (after `npm ci` in this folder)
"use strict";

const { NodeSDK } = require("@opentelemetry/sdk-node");
const { OpenAIInstrumentation } = require("@opentelemetry/instrumentation-openai");
const { OTLPTraceExporter } = require("@opentelemetry/exporter-trace-otlp-proto");
const { OTLPLogExporter } = require("@opentelemetry/exporter-logs-otlp-proto");
const { SimpleLogRecordProcessor } = require("@opentelemetry/sdk-logs");
const { SimpleSpanProcessor } = require("@opentelemetry/sdk-trace-base");

const sdk = new NodeSDK({
  spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter())],
  logRecordProcessors: [new SimpleLogRecordProcessor({ exporter: new OTLPLogExporter() })],
  instrumentations: [new OpenAIInstrumentation()],
});
sdk.start();

// Required after sdk.start() so the instrumentation patches it.
const { OpenAI } = require("openai");
const { trace } = require("@opentelemetry/api");

async function main(question, expected) {
  const client = new OpenAI({ maxRetries: 0 });
  const model = process.env.AGENT_MODEL || "agent-model";
  const messages = [
    { role: "system", content: "Answer in one short sentence." },
    { role: "user", content: question },
  ];
  const first = await client.chat.completions.create({ model, messages });
  messages.push({ role: "assistant", content: first.choices[0].message.content || "" });
  messages.push({ role: "user", content: "Say it again." });
  const second = await client.chat.completions.create({ model, messages });
  const reward = (second.choices[0].message.content || "").includes(expected) ? 1.0 : 0.0;
  const span = trace.getTracer("genai-agent").startSpan("agentlightning.reward", {
    attributes: { "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": reward },
  });
  span.end();
  await sdk.shutdown();
  console.log(`reward=${reward.toFixed(1)}`);
}

main(process.argv[2], process.argv[3]).catch(async (error) => {
  console.error(error);
  await sdk.shutdown();
  process.exit(1);
});
