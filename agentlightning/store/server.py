"""v0.3's `agentlightning.store.server`: `LightningStoreServer` lives in `agentlightning.store_http.server`."""

from agentlightning.store_http.server import AUTH_TOKEN_ENV, DEFAULT_STORE_PORT, LightningStoreServer

__all__ = ["LightningStoreServer", "DEFAULT_STORE_PORT", "AUTH_TOKEN_ENV"]
