"""Integrations with third-party systems, each behind its own optional extra (imported only when used)."""
