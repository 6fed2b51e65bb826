"""v0.3's import path for the HTTP store pair, the classes of `agentlightning.store_http`.

Importing this module loads the HTTP stack (FastAPI, aiohttp), which `import agentlightning.store` alone does not.
"""

from agentlightning.store_http.client import LightningStoreClient
from agentlightning.store_http.server import LightningStoreServer

__all__ = ["LightningStoreServer", "LightningStoreClient"]
