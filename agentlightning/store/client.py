"""Old path of `LightningStoreClient` (v0.3); the class lives in `agentlightning.store_http.client`."""

from agentlightning.compat.store_client import AUTH_TOKEN_ENV, LightningStoreClient

__all__ = ["LightningStoreClient", "AUTH_TOKEN_ENV"]
