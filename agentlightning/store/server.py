"""Old path of `LightningStoreServer` (v0.3); the class lives in `agentlightning.store_http.server`."""

from agentlightning.compat.store_server import AUTH_TOKEN_ENV, DEFAULT_STORE_PORT, LightningStoreServer

__all__ = ["LightningStoreServer", "DEFAULT_STORE_PORT", "AUTH_TOKEN_ENV"]
