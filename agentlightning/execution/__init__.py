"""Execution strategies: where the algorithm and runner bundles run and how they are stopped."""

from __future__ import annotations

from .base import ExecutionStrategy
from .client_server import ClientServerExecutionStrategy
from .errors import RolloutsFailedError, RunError
from .events import ExecutionEvent, MultiprocessingEvent, ThreadingEvent
from .ray_strategy import RayExecutionStrategy
from .shared_memory import SharedMemoryExecutionStrategy

__all__ = [
    "ExecutionStrategy",
    "ClientServerExecutionStrategy",
    "SharedMemoryExecutionStrategy",
    "RayExecutionStrategy",
    "ExecutionEvent",
    "ThreadingEvent",
    "MultiprocessingEvent",
    "RunError",
    "RolloutsFailedError",
]
