"""Reward helpers from integrations (import the submodule: `agentlightning.contrib.reward.agentos`)."""
