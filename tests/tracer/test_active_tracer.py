"""The process-wide active tracer and the dummy tracer's defaults (v0.3 behaviour)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agentlightning.tracer import DummyTracer, clear_active_tracer, get_active_tracer, set_active_tracer
from agentlightning.types import TraceStatus


@pytest.fixture(autouse=True)
def no_active_tracer() -> Iterator[None]:
    clear_active_tracer()
    yield
    clear_active_tracer()


def test_set_active_tracer_refuses_to_replace_another_tracer() -> None:
    first, second = DummyTracer(), DummyTracer()
    set_active_tracer(first)
    set_active_tracer(first)  # the same tracer again is fine
    with pytest.raises(ValueError, match="another tracer \\(DummyTracer\\) is already active"):
        set_active_tracer(second)
    assert get_active_tracer() is first
    clear_active_tracer()
    set_active_tracer(second)
    assert get_active_tracer() is second


async def test_nested_trace_contexts_still_restore_the_outer_tracer() -> None:
    outer, inner = DummyTracer(), DummyTracer()
    async with outer.trace_context("outer"):
        async with inner.trace_context("inner"):
            assert get_active_tracer() is inner
        assert get_active_tracer() is outer
    assert get_active_tracer() is None


def test_dummy_create_span_defaults_to_status_ok() -> None:
    tracer = DummyTracer()
    assert tracer.create_span("x").status.status_code == "OK"
    explicit = tracer.create_span("y", status=TraceStatus(status_code="ERROR", description="boom"))
    assert explicit.status.status_code == "ERROR" and explicit.status.description == "boom"
