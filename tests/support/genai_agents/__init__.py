"""Agents nobody here wrote the instrumentation of: only the official OpenTelemetry GenAI instrumentations."""
