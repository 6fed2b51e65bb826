"""In-process collections: dicts with secondary indexes, a deque-backed queue and a dict key-value map.

Every operation completes without suspending, so on one event loop a store method built from them is
already atomic; `atomic()` only takes a lock when the collections are shared between threads.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
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

from ..utils import paginate, sort_key
from .base import AtomicMode, Collection, KeyValue, LightningCollections, Queue

__all__ = [
    "InMemoryCollection",
    "InMemoryQueue",
    "InMemoryKeyValue",
    "InMemoryLightningCollections",
    "matches_filters",
]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _field_matches(value: Any, condition: Any) -> bool:
    if not isinstance(condition, dict):
        return value == condition
    if "exact" in condition and value != condition["exact"]:
        return False
    if "within" in condition and value not in condition["within"]:
        return False
    if "contains" in condition:
        if value is None or str(condition["contains"]) not in str(value):
            return False
    return True


def matches_filters(item: Any, filters: Optional[FilterOptions]) -> bool:
    """Whether a model satisfies `FilterOptions` (fields combined by `_aggregate`, `_must` always ANDed)."""
    if not filters:
        return True
    must = filters.get("_must")
    if must and not matches_filters(item, must):
        return False
    conditions = [(k, v) for k, v in filters.items() if k not in ("_aggregate", "_must")]
    if not conditions:
        return True
    results = (_field_matches(getattr(item, field, None), cond) for field, cond in conditions)
    if filters.get("_aggregate", "and") == "or":
        return any(results)
    return all(results)


def _set_of(values: Any) -> Any:
    """`values` as a frozenset when they are all hashable (an O(1) membership test), else as they are."""
    try:
        return frozenset(values)
    except TypeError:
        return values


def compile_filters(filters: Optional[FilterOptions]) -> Optional[FilterOptions]:
    """The filters with each `within` list as a set: testing N items against M ids costs O(N), not O(N * M)."""
    if not filters:
        return filters
    compiled: dict[str, Any] = {}
    for field, condition in filters.items():
        if field == "_must":
            condition = compile_filters(condition)
        elif isinstance(condition, dict) and "within" in condition:
            condition = {**condition, "within": _set_of(condition["within"])}
        compiled[field] = condition
    return compiled  # type: ignore[return-value]


def _index_candidates(filters: Optional[FilterOptions], indexed: Iterable[str]) -> Optional[tuple[str, list[Any]]]:
    """Pick an indexed field whose values every match must take (from `_must` or an AND filter)."""
    if not filters:
        return None
    sources: list[FilterOptions] = []
    must = filters.get("_must")
    if must:
        sources.append(must)
    if filters.get("_aggregate", "and") == "and":
        sources.append(filters)
    for source in sources:
        for field in indexed:
            cond = source.get(field)
            if isinstance(cond, dict):
                if "exact" in cond:
                    return field, [cond["exact"]]
                if "within" in cond:
                    return field, list(cond["within"])
    return None


class InMemoryCollection(Collection[T], Generic[T]):
    """A dict of models with optional secondary indexes on fields used for lookups (e.g. `rollout_id`).

    `key_field` names the field that is the key (when the key is one field): a filter on it is answered
    by key lookups instead of a scan.
    """

    def __init__(
        self, key_of: Callable[[T], Hashable], *, indexes: Sequence[str] = (), key_field: Optional[str] = None
    ) -> None:
        self._key_of = key_of
        self._key_field = key_field
        self._items: dict[Hashable, T] = {}
        self._order: dict[Hashable, int] = {}
        self._counter = 0
        self._indexes: dict[str, dict[Any, dict[Hashable, None]]] = {field: {} for field in indexes}

    def key_of(self, item: T) -> Hashable:
        return self._key_of(item)

    def _index_add(self, key: Hashable, item: T) -> None:
        for field, buckets in self._indexes.items():
            buckets.setdefault(getattr(item, field, None), {})[key] = None

    def _index_remove(self, key: Hashable, item: T) -> None:
        for field, buckets in self._indexes.items():
            value = getattr(item, field, None)
            bucket = buckets.get(value)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del buckets[value]

    def _put(self, key: Hashable, item: T) -> None:
        old = self._items.get(key)
        self._items[key] = item
        if old is None:
            self._counter += 1
            self._order[key] = self._counter
            if self._indexes:
                self._index_add(key, item)
            return
        if not self._indexes:
            return
        # A replacement moves only the index entries whose field changed (most updates touch none).
        for field, buckets in self._indexes.items():
            before = getattr(old, field, None)
            after = getattr(item, field, None)
            if before is after or before == after:
                continue
            bucket = buckets.get(before)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del buckets[before]
            buckets.setdefault(after, {})[key] = None

    async def get(self, key: Hashable) -> Optional[T]:
        return self._items.get(key)

    def get_nowait(self, key: Hashable) -> Optional[T]:
        return self._items.get(key)

    async def insert(self, item: T) -> None:
        key = self._key_of(item)
        if key in self._items:
            raise ValueError(f"{key!r} already exists")
        self._put(key, item)

    async def update(self, item: T) -> None:
        key = self._key_of(item)
        if key not in self._items:
            raise ValueError(f"{key!r} does not exist")
        self._put(key, item)

    async def upsert(self, item: T) -> None:
        self._put(self._key_of(item), item)

    async def delete(self, key: Hashable) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self._order.pop(key, None)
            self._index_remove(key, item)

    def keys_where(self, field: str, value: Any) -> list[Hashable]:
        """Keys whose indexed `field` equals `value`, in insertion order."""
        bucket = self._indexes[field].get(value)
        if not bucket:
            return []
        keys = list(bucket)
        keys.sort(key=self._order.__getitem__)
        return keys

    def _index_bucket(self, filters: Optional[FilterOptions]) -> Optional[dict[Hashable, None]]:
        """The keys matching `filters` straight from an index, when the filter is one exact indexed field.

        The store's commonest lookups (a rollout's attempts or spans: `{"_must": {field: {"exact": v}}}`)
        then cost a dict lookup instead of a scan of the candidates.
        """
        if not filters or len(filters) != 1:
            return None
        must = filters.get("_must")
        if not must or len(must) != 1:
            return None
        ((field, condition),) = must.items()
        buckets = self._indexes.get(field)
        if buckets is None or not isinstance(condition, dict) or len(condition) != 1 or "exact" not in condition:
            return None
        return buckets.get(condition["exact"], {})

    def _matching(self, filters: Optional[FilterOptions]) -> list[T]:
        bucket = self._index_bucket(filters)
        if bucket is not None:
            keys = list(bucket)
            if len(keys) > 1:
                keys.sort(key=self._order.__getitem__)
            return [self._items[k] for k in keys]
        filters = compile_filters(filters)
        searchable = (*([self._key_field] if self._key_field else []), *self._indexes)
        narrowed = _index_candidates(filters, searchable)
        if narrowed is None:
            candidates: Iterable[T] = self._items.values()
        else:
            field, values = narrowed
            keys: list[Hashable] = []
            if field == self._key_field:
                keys = [value for value in dict.fromkeys(values) if value in self._items]
            else:
                buckets = self._indexes[field]
                for value in dict.fromkeys(values):
                    keys.extend(buckets.get(value, ()))
            keys.sort(key=self._order.__getitem__)
            candidates = [self._items[k] for k in keys]
        if not filters:
            return list(candidates)
        return [item for item in candidates if matches_filters(item, filters)]

    async def query(
        self,
        filters: Optional[FilterOptions] = None,
        *,
        sort_by: Optional[str] = None,
        sort_order: Literal["asc", "desc"] = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[T]:
        items = self._matching(filters)
        if sort_by is not None:
            # A stable sort keeps insertion order among ties, in both directions.
            items.sort(key=lambda item: sort_key(getattr(item, sort_by, None)), reverse=sort_order == "desc")
        return PaginatedResult[Any].model_construct(
            items=paginate(items, limit, offset), limit=limit, offset=offset, total=len(items)
        )

    async def count(self, filters: Optional[FilterOptions] = None) -> int:
        if not filters:
            return len(self._items)
        bucket = self._index_bucket(filters)
        if bucket is not None:
            return len(bucket)
        return len(self._matching(filters))

    async def count_where(self, field: str, value: Any) -> int:
        buckets = self._indexes.get(field)
        if buckets is None:
            return await super().count_where(field, value)
        return len(buckets.get(value, ()))

    async def size(self) -> int:
        return len(self._items)


class InMemoryQueue(Queue[K], Generic[K]):
    """FIFO of unique ids with O(1) enqueue, dequeue and removal (removed entries are skipped lazily)."""

    def __init__(self) -> None:
        self._entries: deque[tuple[K, int]] = deque()
        self._members: dict[K, int] = {}
        self._tokens = 0

    async def has(self, item: K) -> bool:
        return item in self._members

    async def enqueue(self, items: Sequence[K]) -> None:
        for item in items:
            if item in self._members:
                continue
            self._tokens += 1
            self._members[item] = self._tokens
            self._entries.append((item, self._tokens))

    def _drop_stale_head(self) -> None:
        while self._entries:
            item, token = self._entries[0]
            if self._members.get(item) == token:
                return
            self._entries.popleft()

    async def dequeue(self, limit: int = 1) -> list[K]:
        out: list[K] = []
        while len(out) < limit:
            self._drop_stale_head()
            if not self._entries:
                break
            item, _ = self._entries.popleft()
            del self._members[item]
            out.append(item)
        return out

    async def remove(self, item: K) -> None:
        self._members.pop(item, None)

    async def peek(self, limit: int = 1) -> list[K]:
        out: list[K] = []
        for item, token in self._entries:
            if len(out) >= limit:
                break
            if self._members.get(item) == token:
                out.append(item)
        return out

    async def size(self) -> int:
        return len(self._members)


class InMemoryKeyValue(KeyValue[K, V], Generic[K, V]):
    def __init__(self) -> None:
        self._data: dict[K, Any] = {}

    async def has(self, key: K) -> bool:
        return key in self._data

    async def get(self, key: K, default: Optional[V] = None) -> Optional[V]:
        return self._data.get(key, default)

    async def set(self, key: K, value: V) -> None:
        self._data[key] = value

    async def inc(self, key: K, amount: int = 1) -> int:
        value = self._data.get(key, 0) + amount
        self._data[key] = value
        return value

    async def chmax(self, key: K, value: int) -> int:
        current = self._data.get(key, 0)
        if value > current:
            self._data[key] = value
            return value
        self._data.setdefault(key, current)
        return current

    async def pop(self, key: K, default: Optional[V] = None) -> Optional[V]:
        return self._data.pop(key, default)

    async def size(self) -> int:
        return len(self._data)


class InMemoryLightningCollections(LightningCollections):
    """Collections held in this process; `thread_safe=True` makes `atomic()` take a threading lock."""

    def __init__(self, *, thread_safe: bool = False) -> None:
        self.rollouts: InMemoryCollection[Rollout] = InMemoryCollection(
            lambda r: r.rollout_id, indexes=("status",), key_field="rollout_id"
        )
        self.attempts: InMemoryCollection[Attempt] = InMemoryCollection(
            lambda a: a.attempt_id, indexes=("rollout_id",), key_field="attempt_id"
        )
        self.spans: InMemoryCollection[Span] = InMemoryCollection(
            lambda s: (s.rollout_id, s.attempt_id, s.span_id), indexes=("rollout_id",)
        )
        self.resources: InMemoryCollection[ResourcesUpdate] = InMemoryCollection(
            lambda r: r.resources_id, key_field="resources_id"
        )
        self.workers: InMemoryCollection[Worker] = InMemoryCollection(lambda w: w.worker_id, key_field="worker_id")
        self.rollout_queue: InMemoryQueue[str] = InMemoryQueue()
        self.span_sequence_ids: InMemoryKeyValue[str, int] = InMemoryKeyValue()
        self.store_meta: InMemoryKeyValue[str, Any] = InMemoryKeyValue()
        self.thread_safe = thread_safe
        # Re-entrant so a thread may nest blocks (e.g. the watchdog's updates inside a read snapshot).
        self._lock = threading.RLock() if thread_safe else None

        # Every call opens a block, so the block is one reusable object rather than a generator per call.
        self._block: AbstractAsyncContextManager[LightningCollections] = (
            _LockedBlock(self, self._lock) if self._lock is not None else _OpenBlock(self)
        )

    def atomic(
        self, *, mode: AtomicMode = "rw", snapshot: bool = False
    ) -> AbstractAsyncContextManager[LightningCollections]:
        # Operations never suspend, so without threads a block cannot interleave with another task.
        return self._block


class _OpenBlock(AbstractAsyncContextManager[LightningCollections]):
    """The atomic block of collections used from one event loop: nothing to take, nothing to release."""

    __slots__ = ("_collections",)

    def __init__(self, collections: LightningCollections) -> None:
        self._collections = collections

    async def __aenter__(self) -> LightningCollections:
        return self._collections

    async def __aexit__(self, *exc_info: Any) -> None:
        return None


class _LockedBlock(AbstractAsyncContextManager[LightningCollections]):
    """The atomic block of collections shared between threads: holds the (re-entrant) lock for the block."""

    __slots__ = ("_collections", "_lock")

    def __init__(self, collections: LightningCollections, lock: Any) -> None:
        self._collections = collections
        self._lock = lock

    async def __aenter__(self) -> LightningCollections:
        self._lock.acquire()
        return self._collections

    async def __aexit__(self, *exc_info: Any) -> None:
        self._lock.release()
