"""The reference framework's import path for `CollectionBasedLightningStore`.

The class lives in `agentlightning.store.collection`; this module only re-exports it.
"""

from .collection import CollectionBasedLightningStore, LightningCollections
from .collection.store import T_Collections

__all__ = ["CollectionBasedLightningStore", "LightningCollections", "T_Collections"]
