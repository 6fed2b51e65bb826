"""LightningStore: the contract and its backends (the HTTP server and client live in `agentlightning.store_http`)."""

from typing import TYPE_CHECKING

from agentlightning._lazy import lazy_exports

from .base import UNSET, LightningStore, LightningStoreCapabilities, LightningStoreStatistics, Unset
from .collection import CollectionBasedLightningStore
from .memory import InMemoryLightningStore
from .threading import LightningStoreThreaded

if TYPE_CHECKING:
    from .postgres import PostgresLightningStore
    from .sqlite import SqliteLightningStore

__all__ = [
    "UNSET",
    "Unset",
    "LightningStore",
    "LightningStoreCapabilities",
    "LightningStoreStatistics",
    "CollectionBasedLightningStore",
    "InMemoryLightningStore",
    "LightningStoreThreaded",
    "LightningStoreServer",
    "LightningStoreClient",
    "SqliteLightningStore",
    "PostgresLightningStore",
]

# HTTP pieces load on first use so `import agentlightning.store` does not import fastapi/aiohttp; they live
# in `store_http`, which imports this package, so v0.3's `agentlightning.store.LightningStore{Server,Client}`
# come through the old-path modules `.server` and `.client`. SQL backends load lazily too: PostgreSQL needs
# the optional psycopg extra.
_LAZY = {
    "LightningStoreServer": ".server",
    "LightningStoreClient": ".client",
    "SqliteLightningStore": ".sqlite",
    "PostgresLightningStore": ".postgres",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
