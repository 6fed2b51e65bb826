"""Small shared utilities (ids, OpenTelemetry helpers, system snapshots, server launching)."""
