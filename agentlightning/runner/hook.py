"""v0.3's `agentlightning.runner.hook.Hook`: the class lives in `agentlightning.types.hooks`."""

from agentlightning.types.hooks import Hook

__all__ = ["Hook"]
