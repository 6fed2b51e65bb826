"""`InMemoryLightningStore`: the collection-based store on in-process dicts, with span memory accounting.

Spans are the bulk of a store's memory, rollouts and attempts the rest. Each stored span is sized (by
`span_size_estimator`), each rollout and attempt too (`record_size_estimator`); once the total passes the
eviction threshold (the store's memory budget, `agl store --memory-budget`), the store frees memory until
it is under the safe threshold, in this order:
1. the spans of finished rollouts, oldest rollout first (reading them raises a RuntimeError that says so);
2. finished rollouts themselves with their attempts, oldest first (they are then unknown to the store);
3. the spans of live rollouts, oldest first (their later spans are dropped too).
Queued and running rollouts are never dropped, so a long run keeps a bounded footprint without losing work.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Optional, Union

from pydantic import BaseModel

from agentlightning.store.memory_limit import memory_limit_bytes
from agentlightning.types import Attempt, AttemptedRollout, Rollout, Span

from ._arguments import RolloutDraft
from .base import LightningStoreCapabilities, LightningStoreStatistics
from .collection.base import LightningCollections
from .collection.memory import InMemoryLightningCollections
from .collection.steps import span_key
from .collection.store import CollectionBasedLightningStore
from .utils import Clock, is_terminal

__all__ = ["InMemoryLightningStore", "estimate_model_size", "estimate_span_size", "estimate_record_size"]

Threshold = Union[int, float]

_ATOMIC_SIZES = {
    type(None): sys.getsizeof(None),
    bool: sys.getsizeof(True),
    int: sys.getsizeof(0),
    float: sys.getsizeof(0.0),
}


def estimate_model_size(obj: Any) -> int:
    """Approximate bytes held by a model (or any nesting of dicts, lists and scalars).

    Counts each object's own size plus what it contains; fast enough to run on every stored span.
    """
    size = _ATOMIC_SIZES.get(type(obj))
    if size is not None:
        return size
    if isinstance(obj, str):
        return 49 + len(obj)
    if isinstance(obj, BaseModel):
        total = 56 + estimate_model_size(obj.__dict__)
        extra = obj.__pydantic_extra__
        if extra:
            total += estimate_model_size(extra)
        return total
    if isinstance(obj, dict):
        total = sys.getsizeof(obj)
        for key, value in obj.items():
            # Span attributes are mostly flat str -> str/number maps: size those inline, recurse for the rest.
            total += 49 + len(key) if type(key) is str else estimate_model_size(key)
            kind = type(value)
            if kind is str:
                total += 49 + len(value)
            else:
                atomic = _ATOMIC_SIZES.get(kind)
                total += atomic if atomic is not None else estimate_model_size(value)
        return total
    if isinstance(obj, (list, tuple, set, frozenset)):
        total = sys.getsizeof(obj)
        for value in obj:
            total += estimate_model_size(value)
        return total
    return sys.getsizeof(obj)


# Fixed cost of a span's model objects (ids, status, context, resource) measured with estimate_model_size.
_SPAN_BASE_BYTES = 4300


def estimate_span_size(span: Span) -> int:
    """Approximate bytes held by a span: a fixed model overhead plus its attributes and events.

    Runs on every stored span, so it walks only the parts that grow with the data.
    """
    total = _SPAN_BASE_BYTES + estimate_model_size(span.attributes)
    if span.events:
        total += estimate_model_size(span.events)
    if span.links:
        total += estimate_model_size(span.links)
    extra = span.__pydantic_extra__
    if extra:
        total += estimate_model_size(extra)
    return total


# Fixed cost of a stored rollout (model, config, queue and index entries) and of an attempt, measured with
# tracemalloc on CPython 3.10-3.12; their inputs and metadata are sized on top.
_ROLLOUT_BASE_BYTES = 2000
_ATTEMPT_BASE_BYTES = 1300


def estimate_record_size(record: Union[Rollout, Attempt]) -> int:
    """Approximate bytes held by a stored rollout or attempt: a fixed overhead plus its user data."""
    metadata = estimate_model_size(record.metadata) if record.metadata else 0
    if isinstance(record, Attempt):
        return _ATTEMPT_BASE_BYTES + metadata
    return _ROLLOUT_BASE_BYTES + estimate_model_size(record.input) + metadata


def _system_memory_bytes() -> int:
    """The memory this process may use: the cgroup (container) limit when there is one, else the host's RAM."""
    return memory_limit_bytes()


def _resolve_threshold(name: str, value: Threshold, capacity: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be bytes (int) or a fraction of memory (float), got {value!r}")
    if isinstance(value, float):
        if not 0.0 < value <= 1.0:
            raise ValueError(f"{name} as a fraction of system memory must be in (0, 1], got {value}")
        return int(value * capacity)
    if value <= 0:
        raise ValueError(f"{name} in bytes must be positive, got {value}")
    return value


class InMemoryLightningStore(CollectionBasedLightningStore[InMemoryLightningCollections]):
    """A store held in this process: fast, not durable, evicts old data to stay under a memory budget.

    Args:
        thread_safe: serialise calls from several threads with a lock (async use needs none).
        eviction_memory_threshold: the memory budget: bytes of spans, rollouts and attempts that trigger
            eviction; int = bytes, float = fraction of the memory this process may use (its cgroup limit in
            a container, else the host's RAM: `store.memory_limit`); default 70 % of it.
        safe_memory_threshold: eviction stops below this; same units; default 80 % of the eviction one.
        span_size_estimator: bytes of one span; default `estimate_span_size`.
        record_size_estimator: bytes of one rollout or attempt; default `estimate_record_size`.
        tracker, scan_debounce_seconds, clock: as for `CollectionBasedLightningStore`.
    """

    def __init__(
        self,
        *,
        thread_safe: bool = False,
        eviction_memory_threshold: Optional[Threshold] = None,
        safe_memory_threshold: Optional[Threshold] = None,
        span_size_estimator: Optional[Callable[[Span], int]] = None,
        record_size_estimator: Optional[Callable[[Union[Rollout, Attempt]], int]] = None,
        tracker: Any = None,
        scan_debounce_seconds: float = 10.0,
        clock: Optional[Clock] = None,
    ) -> None:
        self._memory_collections = InMemoryLightningCollections(thread_safe=thread_safe)
        super().__init__(
            self._memory_collections,
            read_snapshot=thread_safe,
            tracker=tracker,
            scan_debounce_seconds=scan_debounce_seconds,
            clock=clock,
        )
        self._thread_safe = thread_safe
        self._memory_capacity = _system_memory_bytes()
        self._eviction_threshold = _resolve_threshold(
            "eviction_memory_threshold",
            0.7 if eviction_memory_threshold is None else eviction_memory_threshold,
            self._memory_capacity,
        )
        self._safe_threshold = (
            int(self._eviction_threshold * 0.8)
            if safe_memory_threshold is None
            else _resolve_threshold("safe_memory_threshold", safe_memory_threshold, self._memory_capacity)
        )
        if self._safe_threshold > self._eviction_threshold:
            raise ValueError(
                f"safe_memory_threshold ({self._safe_threshold} bytes) must not exceed "
                f"eviction_memory_threshold ({self._eviction_threshold} bytes)"
            )
        self._span_size = span_size_estimator or estimate_span_size
        self._record_size = record_size_estimator or estimate_record_size
        self._span_bytes_total = 0
        self._span_bytes_by_rollout: dict[str, int] = {}
        self._record_bytes_total = 0
        self._record_bytes_by_rollout: dict[str, int] = {}
        # Rollouts that lost their spans (but are still stored): their spans are refused and unreadable.
        self._evicted_rollouts: set[str] = set()

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(
            thread_safe=self._thread_safe, async_safe=True, zero_copy=False, otlp_traces=False
        )

    async def _store_spans(self, c: LightningCollections, spans: list[Span]) -> list[Span]:
        spans_collection = self._memory_collections.spans
        stored: list[Span] = []
        for span in spans:
            rollout_id = span.rollout_id
            if rollout_id in self._evicted_rollouts:
                continue  # the rollout's earlier spans are gone; a partial trace would mislead readers
            if spans_collection.get_nowait(span_key(span)) is not None:
                continue  # a duplicate: the first write wins (see CollectionStoreSteps._store_spans)
            size = self._span_size(span)
            await spans_collection.insert(span)
            self._span_bytes_total += size
            self._span_bytes_by_rollout[rollout_id] = self._span_bytes_by_rollout.get(rollout_id, 0) + size
            stored.append(span)
        await self._keep_within_budget()
        return stored

    # ---- rollouts and attempts count against the budget too ----

    def _count_record(self, rollout_id: str, record: Union[Rollout, Attempt]) -> None:
        size = self._record_size(record)
        self._record_bytes_total += size
        self._record_bytes_by_rollout[rollout_id] = self._record_bytes_by_rollout.get(rollout_id, 0) + size

    async def _enqueue_many(self, drafts: list[RolloutDraft]) -> list[Rollout]:
        rollouts = await super()._enqueue_many(drafts)
        async with self._writes():
            for rollout in rollouts:
                self._count_record(rollout.rollout_id, rollout)
            await self._keep_within_budget()
        return rollouts

    async def _new_attempt(
        self, c: LightningCollections, rollout: Rollout, worker_id: Optional[str], now: float, **worker_changes: Any
    ) -> AttemptedRollout:
        attempted = await super()._new_attempt(c, rollout, worker_id, now, **worker_changes)
        if rollout.rollout_id not in self._record_bytes_by_rollout:  # started directly, never queued
            self._count_record(rollout.rollout_id, rollout)
        self._count_record(rollout.rollout_id, attempted.attempt)
        await self._keep_within_budget()
        return attempted

    # ---- eviction ----

    def _bytes_in_use(self) -> int:
        return self._span_bytes_total + self._record_bytes_total

    async def _keep_within_budget(self) -> None:
        """Once over the eviction threshold, free memory in the module's order until under the safe one."""
        if self._bytes_in_use() <= self._eviction_threshold:
            return
        rollouts = self._memory_collections.rollouts

        def start_time(rollout_id: str) -> float:
            rollout = rollouts.get_nowait(rollout_id)
            return rollout.start_time if rollout is not None else float("-inf")

        def finished(rollout_id: str) -> bool:
            rollout = rollouts.get_nowait(rollout_id)
            return rollout is None or is_terminal(rollout.status)

        with_spans = sorted(self._span_bytes_by_rollout, key=start_time)
        for rollout_id in [r for r in with_spans if finished(r)]:
            if self._bytes_in_use() <= self._safe_threshold:
                return
            await self._drop_spans(rollout_id)
        done = sorted((r for r in self._record_bytes_by_rollout if finished(r)), key=start_time)
        for rollout_id in done:
            if self._bytes_in_use() <= self._safe_threshold:
                return
            await self._drop_rollout(rollout_id)
        for rollout_id in [r for r in with_spans if r in self._span_bytes_by_rollout]:
            if self._bytes_in_use() <= self._safe_threshold:
                return
            await self._drop_spans(rollout_id)

    async def _drop_spans(self, rollout_id: str) -> None:
        spans = self._memory_collections.spans
        for key in spans.keys_where("rollout_id", rollout_id):
            await spans.delete(key)
        self._span_bytes_total -= self._span_bytes_by_rollout.pop(rollout_id, 0)
        self._evicted_rollouts.add(rollout_id)

    async def _drop_rollout(self, rollout_id: str) -> None:
        """Forget a finished rollout entirely: its spans, attempts, sequence counter and the rollout itself."""
        collections = self._memory_collections
        if rollout_id in self._span_bytes_by_rollout:
            await self._drop_spans(rollout_id)
        for key in collections.attempts.keys_where("rollout_id", rollout_id):
            await collections.attempts.delete(key)
        await collections.rollouts.delete(rollout_id)
        await collections.span_sequence_ids.pop(rollout_id)
        self._record_bytes_total -= self._record_bytes_by_rollout.pop(rollout_id, 0)
        self._evicted_rollouts.discard(rollout_id)  # unknown from now on, like a rollout never stored

    async def _check_spans_readable(self, c: LightningCollections, rollout_id: str) -> None:
        if rollout_id in self._evicted_rollouts:
            raise RuntimeError(
                f"spans of rollout {rollout_id!r} were evicted to stay under the memory threshold "
                f"({self._eviction_threshold} bytes); raise eviction_memory_threshold or use a durable store"
            )

    async def statistics(self) -> LightningStoreStatistics:
        stats = await super().statistics()
        stats["total_span_bytes"] = self._span_bytes_total
        stats["total_record_bytes"] = self._record_bytes_total
        stats["eviction_threshold_bytes"] = self._eviction_threshold
        stats["safe_threshold_bytes"] = self._safe_threshold
        stats["memory_capacity_bytes"] = self._memory_capacity
        return stats
