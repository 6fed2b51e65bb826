"""Fixtures for tracer tests: an in-memory store, an OtelTracer bound to it, a loopback OpenAI server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.tracer.base import clear_active_tracer
from agentlightning.tracer.otel import OtelTracer
from tests.support.openai_server import OpenAITestServer


@pytest.fixture
def store() -> InMemoryLightningStore:
    return InMemoryLightningStore()


@pytest.fixture
def tracer(store: InMemoryLightningStore) -> Iterator[OtelTracer]:
    tracer = OtelTracer()
    tracer.init_worker(0, store)
    yield tracer
    tracer.teardown_worker(0)
    clear_active_tracer()


@pytest.fixture(scope="module")
def openai_server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as server:
        yield server
