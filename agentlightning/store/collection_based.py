"""v0.3's `agentlightning.store.collection_based`: the store lives in `agentlightning.store.collection`."""

from .collection import CollectionBasedLightningStore, LightningCollections
from .collection.store import T_Collections

__all__ = ["CollectionBasedLightningStore", "LightningCollections", "T_Collections"]
