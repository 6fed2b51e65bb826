"""What a span's attributes say: flattening and sanitising them for OpenTelemetry (`otel`), the GenAI
semantic conventions and agentlightning's own keys (`genai`), and the rewards spans carry (`rewards`)."""
