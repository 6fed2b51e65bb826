"""Old path of the HTTP store pair (v0.3); see `agentlightning.compat.store_client_server`."""

from agentlightning.compat.store_client_server import LightningStoreClient, LightningStoreServer

__all__ = ["LightningStoreServer", "LightningStoreClient"]
