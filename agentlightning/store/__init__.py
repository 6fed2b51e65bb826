"""LightningStore: the contract and its backends."""

from .base import UNSET, LightningStore, LightningStoreCapabilities, LightningStoreStatistics, Unset

__all__ = ["UNSET", "Unset", "LightningStore", "LightningStoreCapabilities", "LightningStoreStatistics"]
