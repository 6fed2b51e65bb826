"""The reference framework's import path for the HTTP store pair.

v0.3 code imports `LightningStoreServer` and `LightningStoreClient` from here; both are the classes of
`agentlightning.store.server` and `agentlightning.store.client`. Importing this module loads the HTTP
stack (FastAPI, aiohttp), which `import agentlightning.store` alone does not.
"""

from .client import LightningStoreClient
from .server import LightningStoreServer

__all__ = ["LightningStoreServer", "LightningStoreClient"]
