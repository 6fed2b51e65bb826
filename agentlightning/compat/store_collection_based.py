"""The reference framework's import path for `CollectionBasedLightningStore`.

The class lives in `agentlightning.store.collection`; this module only re-exports it.
"""

from agentlightning.store.collection import CollectionBasedLightningStore, LightningCollections
from agentlightning.store.collection.store import T_Collections

__all__ = ["CollectionBasedLightningStore", "LightningCollections", "T_Collections"]
