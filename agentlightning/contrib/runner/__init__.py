"""Runners from integrations (import the submodule: `agentlightning.contrib.runner.agentos`)."""
