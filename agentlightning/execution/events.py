"""Stop flags shared by the bundles of one training run (threads or processes)."""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.context import BaseContext
from typing import Any, Optional, Protocol, runtime_checkable

__all__ = ["ExecutionEvent", "ThreadingEvent", "MultiprocessingEvent"]


@runtime_checkable
class ExecutionEvent(Protocol):
    """A cooperative stop flag: bundles poll `is_set()` and wind down when it turns true."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: Optional[float] = None) -> bool: ...


class _WrappedEvent:
    """An `ExecutionEvent` over a `threading.Event` or a multiprocessing one (same methods)."""

    def __init__(self, event: Any) -> None:
        self._event = event

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        return self._event.wait(timeout)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(is_set={self.is_set()})"


class ThreadingEvent(_WrappedEvent):
    """Stop flag for bundles running as threads of one process."""

    def __init__(self) -> None:
        super().__init__(threading.Event())


class MultiprocessingEvent(_WrappedEvent):
    """Stop flag shared with child processes (pass it to them as an argument)."""

    def __init__(self, *, ctx: Optional[BaseContext] = None) -> None:
        context: Any = ctx or multiprocessing.get_context()
        super().__init__(context.Event())
