"""Old path of `CollectionBasedLightningStore` (v0.3); the class lives in `agentlightning.store.collection`."""

from agentlightning.compat.store_collection_based import (
    CollectionBasedLightningStore,
    LightningCollections,
    T_Collections,
)

__all__ = ["CollectionBasedLightningStore", "LightningCollections", "T_Collections"]
