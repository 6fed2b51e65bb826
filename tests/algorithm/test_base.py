"""Algorithm base: component links, sync/async detection, deprecated client."""

from __future__ import annotations

import gc
from typing import Any, Optional

import pytest

from agentlightning.algorithm.base import Algorithm
from agentlightning.algorithm.fast import FastAlgorithm
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import PromptTemplate


class SyncAlgo(Algorithm):
    def run(self, train_dataset: Optional[Any] = None, val_dataset: Optional[Any] = None) -> None:
        self.seen = (train_dataset, val_dataset)


class AsyncAlgo(FastAlgorithm):
    async def run(self, train_dataset: Optional[Any] = None, val_dataset: Optional[Any] = None) -> None:
        self.seen = (train_dataset, val_dataset)


class Owner:
    """Stands in for a trainer / adapter / proxy: anything weak-referenceable."""


def test_is_async_follows_run() -> None:
    assert SyncAlgo().is_async() is False
    assert AsyncAlgo().is_async() is True
    assert isinstance(AsyncAlgo(), Algorithm)


async def test_call_delegates_to_run() -> None:
    algo = AsyncAlgo()
    await algo([1], [2])
    assert algo.seen == ([1], [2])
    sync = SyncAlgo()
    sync(train_dataset=[3])
    assert sync.seen == ([3], None)


def test_unset_components_raise_with_guidance() -> None:
    algo = SyncAlgo()
    with pytest.raises(ValueError, match="no store"):
        algo.get_store()
    with pytest.raises(ValueError, match="no trainer"):
        algo.get_trainer()
    with pytest.raises(ValueError, match="no adapter"):
        algo.get_adapter()
    assert algo.get_llm_proxy() is None
    assert algo.get_initial_resources() is None
    assert algo.has_adapter() is False


def test_store_is_strong_and_others_are_weak() -> None:
    algo = SyncAlgo()
    store = InMemoryLightningStore()
    algo.set_store(store)
    assert algo.get_store() is store

    trainer, adapter, proxy = Owner(), Owner(), Owner()
    algo.set_trainer(trainer)  # type: ignore[arg-type]
    algo.set_adapter(adapter)  # type: ignore[arg-type]
    algo.set_llm_proxy(proxy)  # type: ignore[arg-type]
    assert algo.get_trainer() is trainer
    assert algo.get_adapter() is adapter
    assert algo.get_llm_proxy() is proxy
    del trainer, adapter, proxy
    gc.collect()
    with pytest.raises(ValueError, match="garbage collected"):
        algo.get_trainer()
    with pytest.raises(ValueError, match="garbage collected"):
        algo.get_adapter()
    with pytest.raises(ValueError, match="garbage collected"):
        algo.get_llm_proxy()
    algo.set_llm_proxy(None)
    assert algo.get_llm_proxy() is None


def test_initial_resources_and_deprecated_get_client() -> None:
    algo = SyncAlgo()
    resources = {"prompt": PromptTemplate(template="hi {x}", engine="f-string")}
    algo.set_initial_resources(resources)  # type: ignore[arg-type]
    assert algo.get_initial_resources() == resources
    store = InMemoryLightningStore()
    algo.set_store(store)
    with pytest.warns(DeprecationWarning, match="get_store"):
        assert algo.get_client() is store


def test_base_run_is_abstract() -> None:
    with pytest.raises(NotImplementedError, match="must implement run"):
        Algorithm().run()
