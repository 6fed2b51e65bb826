"""The reference framework's import path for the HTTP store pair.

v0.3 code imports `LightningStoreServer` and `LightningStoreClient` from here; both are the classes of
`agentlightning.store_http.server` and `agentlightning.store_http.client`. Importing this module loads the HTTP
stack (FastAPI, aiohttp), which `import agentlightning.store` alone does not.
"""

from .store_client import LightningStoreClient
from .store_server import LightningStoreServer

__all__ = ["LightningStoreServer", "LightningStoreClient"]
