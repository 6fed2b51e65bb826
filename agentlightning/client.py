"""Old path of the deprecated v0.1 task client; it lives in `agentlightning.compat.client`."""

from agentlightning.compat.client import AgentLightningClient, DevTaskLoader

__all__ = ["AgentLightningClient", "DevTaskLoader"]
