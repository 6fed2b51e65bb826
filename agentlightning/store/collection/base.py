"""The storage interface `CollectionBasedLightningStore` is written against.

A backend provides keyed collections of models, a FIFO queue of rollout ids, a key-value map of span
sequence counters and an `atomic()` block; the store logic (state machine, queue rules, validation)
is written once on top of these and shared by every backend that implements them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, Literal, Optional, TypeVar

from agentlightning.types import (
    Attempt,
    FilterOptions,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    Span,
    Worker,
)

__all__ = ["Collection", "Queue", "KeyValue", "LightningCollections", "AtomicMode"]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

AtomicMode = Literal["r", "rw"]


class Collection(ABC, Generic[T]):
    """Models of one kind, keyed by their primary key (`key_of`), remembered in insertion order.

    `query` filters take the shape of `FilterOptions`: field -> {exact, within, contains}, combined by
    `_aggregate` ("and"/"or"), plus `_must` conditions that always apply. Sorting puts None first
    ascending (last descending) and keeps insertion order among ties.
    """

    @abstractmethod
    def key_of(self, item: T) -> Hashable: ...

    @abstractmethod
    async def get(self, key: Hashable) -> Optional[T]: ...

    @abstractmethod
    async def insert(self, item: T) -> None:
        """Add a new item; raises ValueError when the key exists."""

    @abstractmethod
    async def update(self, item: T) -> None:
        """Replace an existing item (same key); raises ValueError when it does not exist."""

    @abstractmethod
    async def upsert(self, item: T) -> None:
        """Insert or replace; a replaced item keeps its insertion position."""

    @abstractmethod
    async def delete(self, key: Hashable) -> None: ...

    @abstractmethod
    async def query(
        self,
        filters: Optional[FilterOptions] = None,
        *,
        sort_by: Optional[str] = None,
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[T]: ...

    @abstractmethod
    async def count(self, filters: Optional[FilterOptions] = None) -> int: ...

    async def count_where(self, field: str, value: Any) -> int:
        """How many items have `field == value` (backends with an index on the field answer from it)."""
        return await self.count({"_must": {field: {"exact": value}}})

    @abstractmethod
    async def size(self) -> int: ...


class Queue(ABC, Generic[K]):
    """A FIFO of unique ids: enqueuing an id already queued is a no-op."""

    @abstractmethod
    async def has(self, item: K) -> bool: ...

    @abstractmethod
    async def enqueue(self, items: Sequence[K]) -> None: ...

    @abstractmethod
    async def dequeue(self, limit: int = 1) -> list[K]: ...

    @abstractmethod
    async def remove(self, item: K) -> None:
        """Drop an id wherever it is in the queue (no-op when absent)."""

    @abstractmethod
    async def peek(self, limit: int = 1) -> list[K]: ...

    @abstractmethod
    async def size(self) -> int: ...


class KeyValue(ABC, Generic[K, V]):
    """A plain mapping with the two atomic counters the store needs (`inc`, `chmax`)."""

    @abstractmethod
    async def has(self, key: K) -> bool: ...

    @abstractmethod
    async def get(self, key: K, default: Optional[V] = None) -> Optional[V]: ...

    @abstractmethod
    async def set(self, key: K, value: V) -> None: ...

    @abstractmethod
    async def inc(self, key: K, amount: int = 1) -> int:
        """Add `amount` (missing = 0) and return the new value."""

    @abstractmethod
    async def chmax(self, key: K, value: int) -> int:
        """Raise the value to at least `value` and return the result."""

    @abstractmethod
    async def pop(self, key: K, default: Optional[V] = None) -> Optional[V]: ...

    @abstractmethod
    async def size(self) -> int: ...


class LightningCollections(ABC):
    """Everything a store keeps, plus `atomic()` which serialises a multi-step change.

    Attributes:
        rollouts: keyed by `rollout_id`.
        attempts: keyed by `attempt_id`; queried by `rollout_id`.
        spans: keyed by `(rollout_id, attempt_id, span_id)`; queried by `rollout_id`.
        resources: keyed by `resources_id`.
        workers: keyed by `worker_id`.
        rollout_queue: ids of rollouts waiting to be dequeued.
        span_sequence_ids: rollout id -> last span sequence id handed out or seen.
        store_meta: small named values of the store itself (e.g. the latest resources id).
    """

    rollouts: Collection[Rollout]
    attempts: Collection[Attempt]
    spans: Collection[Span]
    resources: Collection[ResourcesUpdate]
    workers: Collection[Worker]
    rollout_queue: Queue[str]
    span_sequence_ids: KeyValue[str, int]
    store_meta: KeyValue[str, Any]

    @abstractmethod
    def atomic(
        self, *, mode: AtomicMode = "rw", snapshot: bool = False
    ) -> AbstractAsyncContextManager[LightningCollections]:
        """Run the block as one unit: no other change interleaves with a `rw` block.

        `snapshot=True` asks reads to see one consistent state (backends may ignore it when every
        read already does).
        """
