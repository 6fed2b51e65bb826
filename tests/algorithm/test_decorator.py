"""@algo: parameter injection, sync and async functions, direct calls."""

from __future__ import annotations

from typing import Any

import pytest

from agentlightning.algorithm import algo
from agentlightning.algorithm.base import Algorithm
from agentlightning.algorithm.decorator import FunctionalAlgorithm
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import PromptTemplate


class Owner:
    pass


async def test_async_function_gets_declared_components() -> None:
    received: dict[str, Any] = {}

    @algo
    async def my_algo(*, store: Any, train_dataset: Any, initial_resources: Any, adapter: Any) -> None:
        received.update(store=store, train=train_dataset, resources=initial_resources, adapter=adapter)

    assert isinstance(my_algo, FunctionalAlgorithm) and isinstance(my_algo, Algorithm)
    assert my_algo.is_async()
    store = InMemoryLightningStore()
    my_algo.set_store(store)
    resources = {"p": PromptTemplate(template="{x}", engine="f-string")}
    my_algo.set_initial_resources(resources)  # type: ignore[arg-type]
    await my_algo.run(train_dataset=[1, 2])  # type: ignore[misc]
    assert received == {"store": store, "train": [1, 2], "resources": resources, "adapter": None}


def test_sync_function_only_gets_what_it_declares() -> None:
    calls: list[tuple[Any, ...]] = []

    @algo
    def sync_algo(val_dataset: Any, llm_proxy: Any = "unused-default") -> None:
        calls.append((val_dataset, llm_proxy))

    assert not sync_algo.is_async()
    sync_algo.run(val_dataset=[2])  # type: ignore[arg-type]
    assert calls == [([2], None)]


def test_a_dataset_the_function_cannot_take_raises_type_error() -> None:
    calls: list[Any] = []

    @algo
    def val_only(val_dataset: Any) -> None:
        calls.append(val_dataset)

    @algo
    async def no_data(*, store: Any = None) -> None:
        calls.append(store)

    with pytest.raises(TypeError, match="'val_only' was given train_dataset but has no 'train_dataset' parameter"):
        val_only.run(train_dataset=[1], val_dataset=[2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'no_data' was given val_dataset"):
        no_data.run(val_dataset=[2])  # type: ignore[arg-type]
    assert calls == []  # nothing ran
    val_only.run(train_dataset=None, val_dataset=[2])  # None is "not given"  # type: ignore[arg-type]
    val_only.run(train_dataset=[], val_dataset=[3])  # nor does an empty dataset lose anything  # type: ignore[arg-type]
    assert calls == [[2], [3]]


def test_kwargs_function_gets_everything() -> None:
    seen: dict[str, Any] = {}

    @algo
    def greedy(**kwargs: Any) -> None:
        seen.update(kwargs)

    greedy.set_store(InMemoryLightningStore())
    adapter = Owner()
    greedy.set_adapter(adapter)  # type: ignore[arg-type]
    greedy.run()
    assert set(seen) == {
        "store",
        "train_dataset",
        "val_dataset",
        "llm_proxy",
        "adapter",
        "initial_resources",
        "tracker",
    }
    assert seen["adapter"] is adapter


def test_missing_store_raises_when_declared() -> None:
    @algo
    def needs_store(store: Any) -> None:
        raise AssertionError("not reached")

    with pytest.raises(ValueError, match="no store"):
        needs_store.run()


def test_wrapper_stays_callable_like_the_function() -> None:
    @algo
    def add(store: Any = None, train_dataset: Any = None) -> Any:
        return (store, train_dataset)

    assert add("s", [1]) == ("s", [1])
    assert add.__name__ == "add"  # type: ignore[arg-type]


def test_unfillable_required_parameter_is_rejected() -> None:
    def bad(model_path: str) -> None: ...

    with pytest.raises(TypeError, match="model_path"):
        algo(bad)
