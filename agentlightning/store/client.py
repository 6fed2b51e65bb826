"""v0.3's `agentlightning.store.client`: `LightningStoreClient` lives in `agentlightning.store_http.client`."""

from agentlightning.store_http.client import AUTH_TOKEN_ENV, LightningStoreClient

__all__ = ["LightningStoreClient", "AUTH_TOKEN_ENV"]
