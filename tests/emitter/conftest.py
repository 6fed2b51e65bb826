"""Fixtures for emitter tests: a real OtelTracer writing into an in-memory store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.base import clear_active_tracer
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import Span


@dataclass
class Traced:
    """A tracer bound to a store and one rollout attempt; `spans()` reads back what was stored."""

    tracer: OtelTracer
    store: InMemoryLightningStore
    rollout_id: str
    attempt_id: str

    def context(self):  # type: ignore[no-untyped-def]
        return self.tracer.trace_context(rollout_id=self.rollout_id, attempt_id=self.attempt_id)

    async def spans(self) -> list[Span]:
        return list(await self.store.query_spans(self.rollout_id))


@pytest.fixture
def otel_tracer() -> Iterator[OtelTracer]:
    tracer = OtelTracer(instrument_openai=False)
    yield tracer
    tracer.teardown_worker(0)
    clear_active_tracer()


@pytest.fixture
async def traced(otel_tracer: OtelTracer) -> AsyncIterator[Traced]:
    store = InMemoryLightningStore()
    otel_tracer.init_worker(0, store)
    attempted = await store.start_rollout(input="task")
    yield Traced(otel_tracer, store, attempted.rollout_id, attempted.attempt.attempt_id)
