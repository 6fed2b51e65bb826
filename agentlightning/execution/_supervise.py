"""Run a bundle coroutine until it finishes or the stop event asks it to (then cancel after a grace period)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Optional, TypeVar

from .events import ExecutionEvent

__all__ = ["run_until_stopped"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


async def _cancel_and_wait(task: asyncio.Future[T]) -> None:
    if task.done():
        return
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def run_until_stopped(
    bundle: Awaitable[T],
    stop_event: ExecutionEvent,
    *,
    graceful_delay: Optional[float],
    poll_interval: float = 0.05,
    name: str = "bundle",
) -> Optional[T]:
    """Await `bundle`; once `stop_event` is set, give it `graceful_delay` seconds, then cancel it.

    Returns the bundle's result, or None when it was cancelled because of the stop event. Exceptions of
    the bundle propagate. `graceful_delay=None` waits for the bundle however long it takes.
    """
    task: asyncio.Future[T] = asyncio.ensure_future(bundle)
    try:
        while not task.done():
            if stop_event.is_set():
                done, _ = await asyncio.wait({task}, timeout=graceful_delay)
                if not done:
                    logger.warning(
                        "%s did not stop within %.1f s of the stop signal; cancelling it", name, graceful_delay
                    )
                    await _cancel_and_wait(task)
                    return None
                break
            await asyncio.wait({task}, timeout=poll_interval)
        if task.cancelled():
            return None
        return task.result()
    finally:
        await _cancel_and_wait(task)
