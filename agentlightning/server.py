"""Old path of the deprecated v0.1 task server; it lives in `agentlightning.compat.server`."""

from agentlightning.compat.server import AgentLightningServer

__all__ = ["AgentLightningServer"]
