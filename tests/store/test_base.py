"""Behaviour the `LightningStore` base class gives every store that only implements the abstract methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from agentlightning.store import InMemoryLightningStore, LightningStore
from agentlightning.types import Span

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
        span_of(started, 0, name="a"),
        span_of(started, 7, name="b"),
        span_of(started, 0, name="c"),
    ]
    stored = await store.add_many_spans(batch)
    assert [(s.name, s.sequence_id) for s in stored] == [("a", 1), ("b", 7), ("c", 2)]
    assert store.received == [1, 7, 2]  # add_span never sees an unnumbered span
    assert [s.sequence_id for s in batch] == [0, 7, 0]
