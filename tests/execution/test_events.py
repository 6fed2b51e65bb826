"""Stop events for threads and processes."""

from __future__ import annotations

import multiprocessing
import threading

from agentlightning.execution import ExecutionEvent, MultiprocessingEvent, ThreadingEvent


def _set_in_child(event: MultiprocessingEvent) -> None:
    event.set()


def test_threading_event_roundtrip() -> None:
    event = ThreadingEvent()
    assert isinstance(event, ExecutionEvent)
    assert not event.is_set() and event.wait(0.01) is False
    threading.Thread(target=event.set).start()
    assert event.wait(5.0) is True
    event.clear()
    assert not event.is_set()


def test_multiprocessing_event_is_shared_with_a_child_process() -> None:
    ctx = multiprocessing.get_context("fork")
    event = MultiprocessingEvent(ctx=ctx)
    assert isinstance(event, ExecutionEvent)
    child = ctx.Process(target=_set_in_child, args=(event,))
    child.start()
    child.join(10)
    assert child.exitcode == 0
    assert event.wait(1.0) is True
    event.clear()
    assert event.is_set() is False
