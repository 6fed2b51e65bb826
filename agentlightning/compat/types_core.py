"""v0.3's `agentlightning.types.Hook`: the runner-layer `Hook`, reached from the data layer by name only."""

from agentlightning.runner.hook import Hook

__all__ = ["Hook"]
