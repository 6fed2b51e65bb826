"""gepa runs synchronously in a thread of its own; everything it asks of the store and the reflection model
runs on the algorithm's event loop. `LoopBridge` carries those calls over, and stops them when the run is
cancelled (Ctrl-C, the trainer stopping), so gepa's thread ends instead of waiting for ever."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LoopBridge", "SearchCancelled", "run_in_daemon_thread"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_POLL_SECONDS = 0.5


class SearchCancelled(RuntimeError):
    """Raised in gepa's thread when the algorithm's run was cancelled."""


class LoopBridge:
    """Run coroutines on `loop` from another thread and wait for them, unless the run is cancelled."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.cancelled = threading.Event()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self.cancelled.is_set():
            coroutine.close()
            raise SearchCancelled("the GEPA run was cancelled")
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        while True:
            try:
                return future.result(timeout=_POLL_SECONDS)
            except concurrent.futures.TimeoutError:
                if self.cancelled.is_set() or self.loop.is_closed():
                    future.cancel()
                    raise SearchCancelled("the GEPA run was cancelled") from None


async def run_in_daemon_thread(func: Callable[[], T], bridge: LoopBridge, name: str) -> T:
    """Run a blocking call in a daemon thread (a cancelled run never keeps the process alive); cancelling
    the awaiting task cancels the bridge, so the call's pending store and model requests end too."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[T] = loop.create_future()

    def settle(value: Any, error: Any) -> None:
        if result.done():
            return
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(value)

    def target() -> None:
        try:
            value, error = func(), None
        except BaseException as exc:  # handed to the awaiting task
            value, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:
            logger.debug("%s finished after its event loop closed", name)

    threading.Thread(target=target, name=name, daemon=True).start()
    try:
        return await result
    except asyncio.CancelledError:
        bridge.cancelled.set()
        raise
