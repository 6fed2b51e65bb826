"""Algorithm utilities: store / proxy injection and endless shuffled batches."""

from __future__ import annotations

import random
from collections import Counter
from itertools import islice
from typing import Any, Optional

import pytest

from agentlightning.algorithm.base import Algorithm
from agentlightning.algorithm.utils import batch_iter_over_dataset, with_llm_proxy, with_store
from agentlightning.store.memory import InMemoryLightningStore


class FakeProxy:
    """Records start/stop like an LLMProxy (only the methods with_llm_proxy uses)."""

    def __init__(self, running: bool = False) -> None:
        self.running = running
        self.events: list[str] = []

    def is_running(self) -> bool:
        return self.running

    async def start(self) -> None:
        self.running = True
        self.events.append("start")

    async def stop(self) -> None:
        self.running = False
        self.events.append("stop")


class Algo(Algorithm):
    @with_store
    async def count_rollouts(self, store: Any, extra: int) -> int:
        return len(await store.query_rollouts()) + extra

    @with_llm_proxy()
    async def optional_proxy(self, proxy: Optional[FakeProxy]) -> Optional[bool]:
        return None if proxy is None else proxy.is_running()

    @with_llm_proxy(required=True, auto_start=False)
    async def required_proxy(self, proxy: FakeProxy) -> bool:
        return proxy.is_running()


async def test_with_store_injects_the_store() -> None:
    algo = Algo()
    store = InMemoryLightningStore()
    await store.enqueue_rollout(input="x")
    algo.set_store(store)
    assert await algo.count_rollouts(10) == 11


async def test_with_llm_proxy_starts_and_stops_a_stopped_proxy() -> None:
    algo = Algo()
    assert await algo.optional_proxy() is None
    proxy = FakeProxy()
    algo.set_llm_proxy(proxy)  # type: ignore[arg-type]
    assert await algo.optional_proxy() is True
    assert proxy.events == ["start", "stop"]


async def test_with_llm_proxy_leaves_a_running_proxy_alone() -> None:
    algo = Algo()
    proxy = FakeProxy(running=True)
    algo.set_llm_proxy(proxy)  # type: ignore[arg-type]
    assert await algo.optional_proxy() is True
    assert proxy.events == [] and proxy.running


async def test_required_proxy_missing_raises() -> None:
    with pytest.raises(ValueError, match="needs an LLM proxy"):
        await Algo().required_proxy()
    algo = Algo()
    proxy = FakeProxy()
    algo.set_llm_proxy(proxy)  # type: ignore[arg-type]
    assert await algo.required_proxy() is False  # auto_start=False
    assert proxy.events == []


def test_batches_cover_each_pass_without_duplicates() -> None:
    data = list(range(10))
    batches = list(islice(batch_iter_over_dataset(data, 3, rng=random.Random(0)), 10))
    assert all(len(b) == 3 and len(set(b)) == 3 for b in batches)
    flat = [x for b in batches for x in b]
    # 30 items = exactly 3 passes over 10 items.
    assert Counter(flat) == Counter({i: 3 for i in data})


def test_batch_larger_than_dataset_yields_whole_dataset_reshuffled() -> None:
    data = ["a", "b", "c", "d", "e"]
    batches = list(islice(batch_iter_over_dataset(data, 8, rng=random.Random(1)), 5))
    assert all(sorted(b) == data for b in batches)
    assert len({tuple(b) for b in batches}) > 1


def test_batch_iter_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="batch_size must be positive"):
        next(batch_iter_over_dataset([1], 0))
    with pytest.raises(ValueError, match="empty dataset"):
        next(batch_iter_over_dataset([], 2))
