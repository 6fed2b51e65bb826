"""Runners that integrate third-party systems; import the submodule you need (e.g. `.agentos`)."""
