"""Behaviour the `LightningStore` base class gives every store that only implements the abstract methods."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Optional

import pytest

from agentlightning.store import InMemoryLightningStore, LightningStore
from agentlightning.types import AUTO_SEQUENCE_ID, Span

from .factories import span_of


class SpanByOneStore(InMemoryLightningStore):
    """A store relying on the base class for `add_many_spans`; records the ids `add_span` receives."""

    add_many_spans = LightningStore.add_many_spans  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.received: list[int] = []

    async def add_span(self, span: Span) -> Optional[Span]:
        self.received.append(span.sequence_id)
        return await super().add_span(span)


async def test_default_add_many_spans_allocates_missing_sequence_ids_first() -> None:
    store = SpanByOneStore()
    started = await store.start_rollout(input=1)
    batch: Sequence[Span] = [
        span_of(started, AUTO_SEQUENCE_ID, name="a"),
        span_of(started, 7, name="b"),
        span_of(started, AUTO_SEQUENCE_ID, name="c"),
    ]
    stored = await store.add_many_spans(batch)
    assert [(s.name, s.sequence_id) for s in stored] == [("a", 1), ("b", 7), ("c", 2)]
    assert store.received == [1, 7, 2]  # add_span never sees an unnumbered span
    assert [s.sequence_id for s in batch] == [AUTO_SEQUENCE_ID, 7, AUTO_SEQUENCE_ID]


# ---- v0.3 compatibility: no abstract methods on the contract ----


class OnlyRolloutsStore(LightningStore):
    """A partial store (e.g. a test double): only what its user needs."""

    def __init__(self) -> None:
        self.started: list[object] = []

    async def get_rollout_by_id(self, rollout_id: str) -> None:  # type: ignore[override]
        self.started.append(rollout_id)
        return None


async def test_a_partial_store_can_be_instantiated_and_each_missing_method_raises() -> None:
    store = OnlyRolloutsStore()
    assert await store.get_rollout_by_id("ro-1") is None
    with pytest.raises(NotImplementedError, match=r"OnlyRolloutsStore does not implement LightningStore\.add_span"):
        await store.add_span(Span.from_attributes(attributes={}))
    with pytest.raises(NotImplementedError, match=r"LightningStore\.query_rollouts"):
        await store.query_rollouts()
    with pytest.raises(NotImplementedError, match=r"LightningStore\.update_worker"):
        await store.update_worker("w-1")
    with pytest.raises(NotImplementedError, match=r"LightningStore\.enqueue_rollout"):
        await store.enqueue_rollout(input=1)


# The contract's primitives: every other method of the base class is written in terms of these.
PRIMITIVES = [
    "start_rollout",
    "enqueue_rollout",
    "dequeue_rollout",
    "start_attempt",
    "query_rollouts",
    "update_rollout",
    "wait_for_rollouts",
    "query_attempts",
    "get_latest_attempt",
    "update_attempt",
    "add_span",
    "get_next_span_sequence_id",
    "query_spans",
    "add_resources",
    "update_resources",
    "get_resources_by_id",
    "get_latest_resources",
    "query_resources",
    "query_workers",
    "get_worker_by_id",
    "update_worker",
]


@pytest.mark.parametrize("name", PRIMITIVES)
def test_every_contract_method_raises_not_implemented_individually(name: str) -> None:
    import inspect

    method = getattr(OnlyRolloutsStore(), name)
    parameters = list(inspect.signature(method).parameters.values())
    # Placeholders for the required arguments: the base class raises before looking at them.
    args = [None for p in parameters if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    kwargs: dict[str, Any] = {p.name: [] for p in parameters if p.default is p.empty and p.kind is p.KEYWORD_ONLY}
    with pytest.raises(NotImplementedError, match=rf"LightningStore\.{name}$"):
        asyncio.run(method(*args, **kwargs))


def test_collection_based_store_is_generic() -> None:
    from agentlightning.store.collection import InMemoryLightningCollections
    from agentlightning.store.collection_based import CollectionBasedLightningStore

    alias: Any = CollectionBasedLightningStore[Any]
    store = alias(InMemoryLightningCollections())
    assert isinstance(store, CollectionBasedLightningStore)
    typed = CollectionBasedLightningStore[InMemoryLightningCollections](InMemoryLightningCollections())
    assert isinstance(typed.collections, InMemoryLightningCollections)
    assert issubclass(InMemoryLightningStore, CollectionBasedLightningStore)


async def test_scan_unhealthy_rollouts_marks_stale_attempts_on_backends_and_plain_stores() -> None:
    from agentlightning.store.utils import scan_unhealthy_rollouts
    from agentlightning.types import RolloutConfig

    from .backends import FakeClock

    clock = FakeClock()
    store = InMemoryLightningStore(clock=clock, scan_debounce_seconds=3600)
    config = RolloutConfig(timeout_seconds=5, max_attempts=2, retry_condition=["timeout"])
    started = await store.start_rollout(input=1, config=config)
    await scan_unhealthy_rollouts(store)
    assert (await store.get_latest_attempt(started.rollout_id)).status == "preparing"  # type: ignore[union-attr]
    await scan_unhealthy_rollouts(store, now=clock.now + 6)
    attempt = await store.get_latest_attempt(started.rollout_id)
    assert attempt is not None and attempt.status == "timeout"
    rollout = await store.get_rollout_by_id(started.rollout_id)
    assert rollout is not None and rollout.status == "requeuing"

    class PublicApiOnly(LightningStore):
        """Any store: the scan goes through the public API (the inner store's debounce hides its own scan)."""

        def __init__(self, inner: LightningStore) -> None:
            self.inner = inner

        async def query_rollouts(self, **kwargs: Any) -> Any:  # type: ignore[override]
            return await self.inner.query_rollouts(**kwargs)

        async def get_latest_attempt(self, rollout_id: str) -> Any:
            return await self.inner.get_latest_attempt(rollout_id)

        async def update_attempt(self, rollout_id: str, attempt_id: str, **kwargs: Any) -> Any:  # type: ignore[override]
            return await self.inner.update_attempt(rollout_id, attempt_id, **kwargs)

    second = await store.start_rollout(input=2, config=RolloutConfig(unresponsive_seconds=1))
    wrapper = PublicApiOnly(store)
    await scan_unhealthy_rollouts(wrapper, now=clock.now + 0.5)
    assert (await store.get_latest_attempt(second.rollout_id)).status == "preparing"  # type: ignore[union-attr]
    await scan_unhealthy_rollouts(wrapper, now=clock.now + 2)
    assert (await store.get_latest_attempt(second.rollout_id)).status == "unresponsive"  # type: ignore[union-attr]
    assert (await store.get_rollout_by_id(second.rollout_id)).status == "failed"  # type: ignore[union-attr]
