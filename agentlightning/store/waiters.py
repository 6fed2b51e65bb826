"""Wake-ups for waits: callers on any thread or event loop learn when a rollout finishes or is queued."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Optional

from agentlightning.types import AttemptedRollout, Rollout

__all__ = ["CompletionWaiter", "CompletionWaiters", "QueueWaiters", "dequeue_when_available", "wait_until_finished"]


class CompletionWaiter:
    """One pending `wait_for_rollouts` call: an event on the caller's loop, set from any thread."""

    def __init__(self, rollout_ids: Iterable[str]) -> None:
        self.rollout_ids = frozenset(rollout_ids)
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def wake(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self.event.set()
            return
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:
            # The waiter's loop is closed: nobody is left to wake.
            pass

    async def wait(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        self.event.clear()


class CompletionWaiters:
    """Registry of waiters by rollout id; `notify` is cheap when nobody waits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_rollout: dict[str, set[CompletionWaiter]] = {}

    def register(self, rollout_ids: Iterable[str]) -> CompletionWaiter:
        waiter = CompletionWaiter(rollout_ids)
        with self._lock:
            for rollout_id in waiter.rollout_ids:
                self._by_rollout.setdefault(rollout_id, set()).add(waiter)
        return waiter

    def unregister(self, waiter: CompletionWaiter) -> None:
        with self._lock:
            for rollout_id in waiter.rollout_ids:
                waiters = self._by_rollout.get(rollout_id)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._by_rollout[rollout_id]

    def notify(self, rollout_id: str) -> None:
        if rollout_id not in self._by_rollout:
            return
        with self._lock:
            waiters = list(self._by_rollout.get(rollout_id, ()))
        for waiter in waiters:
            waiter.wake()


class QueueWaiters:
    """Dequeue calls waiting for work; `notify` (a rollout was queued) wakes them all and is cheap when none wait."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: set[CompletionWaiter] = set()

    def register(self) -> CompletionWaiter:
        waiter = CompletionWaiter(())
        with self._lock:
            self._waiting.add(waiter)
        return waiter

    def unregister(self, waiter: CompletionWaiter) -> None:
        with self._lock:
            self._waiting.discard(waiter)

    def notify(self) -> None:
        if not self._waiting:
            return
        with self._lock:
            waiters = list(self._waiting)
        for waiter in waiters:
            waiter.wake()


async def dequeue_when_available(
    waiters: QueueWaiters,
    timeout: float,
    poll_seconds: float,
    dequeue: Callable[[], Awaitable[list[AttemptedRollout]]],
    between_polls: Callable[[], Awaitable[None]],
) -> list[AttemptedRollout]:
    """`wait_for_dequeue` for any backend: claim with `dequeue()` now, then on each wake-up or every `poll_seconds`.

    The waiter is registered before the first claim, so a rollout queued in this process while that claim
    runs still wakes the wait; other processes' enqueues are seen at the next poll.
    """
    deadline = time.monotonic() + timeout
    waiter = waiters.register()
    try:
        while True:
            claimed = await _claim_even_if_cancelled(dequeue)
            remaining = deadline - time.monotonic()
            if claimed or remaining <= 0:
                return claimed
            await waiter.wait(min(remaining, poll_seconds))
            await between_polls()
    finally:
        waiters.unregister(waiter)


async def _claim_even_if_cancelled(dequeue: Callable[[], Awaitable[list[AttemptedRollout]]]) -> list[AttemptedRollout]:
    """Run a claim to its end: one cancelled midway may still commit (SQL runs it on a thread), and a
    claimed rollout must then reach the caller rather than sit in `preparing` with nobody running it."""
    claim = asyncio.ensure_future(dequeue())
    try:
        return await asyncio.shield(claim)
    except asyncio.CancelledError:
        claimed = await claim
        if not claimed:
            raise
        return claimed  # the caller asked to stop, but gets what was claimed for it


async def wait_until_finished(
    waiters: CompletionWaiters,
    rollout_ids: list[str],
    timeout: Optional[float],
    poll_seconds: float,
    finished: Callable[[list[str]], Awaitable[tuple[list[Rollout], bool]]],
    between_polls: Callable[[], Awaitable[None]],
) -> list[Rollout]:
    """`wait_for_rollouts` for any backend: re-read `finished(ids)` on each wake-up or every `poll_seconds`.

    Completions in this process wake the wait at once; other processes' are seen at the next poll.
    `between_polls` runs after each wait (the watchdog, which may itself finish rollouts).
    """
    if timeout == 0:
        return (await finished(rollout_ids))[0]
    deadline = None if timeout is None else time.monotonic() + timeout
    waiter = waiters.register(rollout_ids)
    try:
        while True:
            done, pending = await finished(rollout_ids)
            remaining = None if deadline is None else deadline - time.monotonic()
            if not pending or (remaining is not None and remaining <= 0):
                return done
            await waiter.wait(poll_seconds if remaining is None else min(remaining, poll_seconds))
            await between_polls()
    finally:
        waiters.unregister(waiter)
