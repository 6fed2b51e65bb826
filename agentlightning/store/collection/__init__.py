"""The store logic written once against an abstract collections layer, plus its in-memory collections."""

from .base import AtomicMode, Collection, KeyValue, LightningCollections, Queue
from .memory import (
    InMemoryCollection,
    InMemoryKeyValue,
    InMemoryLightningCollections,
    InMemoryQueue,
    matches_filters,
)
from .store import CollectionBasedLightningStore

__all__ = [
    "AtomicMode",
    "Collection",
    "KeyValue",
    "LightningCollections",
    "Queue",
    "InMemoryCollection",
    "InMemoryKeyValue",
    "InMemoryLightningCollections",
    "InMemoryQueue",
    "matches_filters",
    "CollectionBasedLightningStore",
]
