"""`PauseGate`: hold new model calls while weights change, let running ones finish, then go on.

The policy server and the gateway share it. While paused, `enter()` refuses (the caller answers 429 with
`Retry-After`, which OpenAI clients retry) and `enter_when_open()` holds the call until `resume()` (at most
a timeout); calls already admitted run to their end, and `drain()` waits for them. Each `resume()` reports
the calls it released and how long they were held (`last_release`). Gates can be linked (`link`): pausing or resuming one does the same to the others, so a policy
server swapping weights also holds the calls queued at a gateway in front of it, and `POST /proxy/pause`
on that gateway holds the server too. Thread-safe: servers call it from their event loops, trainers from
their own threads.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional

__all__ = ["PauseGate", "HoldRelease", "MAX_RETRY_AFTER_SECONDS"]

#: Longest `Retry-After` a gate tells callers (a day): a pause is for a weight swap, not for good.
MAX_RETRY_AFTER_SECONDS = 86400.0


def _check_retry_after(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"retry_after_seconds must be a number of seconds, got {value!r}")
    if not (math.isfinite(value) and 0 <= value <= MAX_RETRY_AFTER_SECONDS):
        raise ValueError(
            f"retry_after_seconds must be a finite number in 0..{MAX_RETRY_AFTER_SECONDS:g}, got {value!r}"
        )
    return float(value)


@dataclass(frozen=True)
class HoldRelease:
    """What one `resume()` let go: the calls held while paused, and how long they waited (seconds)."""

    held: int = 0
    longest_s: float = 0.0
    total_s: float = 0.0


@dataclass
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    since: float = field(default_factory=time.monotonic)


class PauseGate:
    """A pause flag with a count of admitted calls (`inflight`).

    Args:
        retry_after_seconds: what a refused caller is told to wait (the `Retry-After` header).
    """

    def __init__(self, retry_after_seconds: float = 1.0) -> None:
        self.retry_after_seconds = _check_retry_after(retry_after_seconds)
        self.reason: Optional[str] = None
        self.rejected = 0
        """Calls refused because the gate was paused (or stayed paused longer than their hold timeout)."""
        self.held = 0
        """Calls that `enter_when_open` held while paused and admitted after a `resume()`."""
        self.held_seconds = 0.0
        """How long those calls waited, summed."""
        self.last_release = HoldRelease()
        """What the latest `resume()` released."""
        self._paused = False
        self._inflight = 0
        self._condition = threading.Condition()
        self._linked: list[PauseGate] = []
        self._waiters: List[_Waiter] = []

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def inflight(self) -> int:
        """Calls admitted and not finished yet."""
        return self._inflight

    def link(self, other: PauseGate) -> None:
        """Pause and resume `other` with this gate, and this gate with `other` (each keeps its own count)."""
        if other is self or other in self._linked:
            return
        self._linked.append(other)
        other._linked.append(self)

    def pause(self, reason: Optional[str] = None, retry_after_seconds: Optional[float] = None) -> None:
        """Refuse new calls until `resume()`; admitted calls go on."""
        for gate in self._group():
            gate._set(True, reason, retry_after_seconds)

    def resume(self) -> None:
        for gate in self._group():
            gate._set(False, None, None)

    def _group(self) -> list[PauseGate]:
        """This gate and every gate linked to it, directly or not."""
        seen: list[PauseGate] = [self]
        for gate in seen:
            seen.extend(other for other in gate._linked if other not in seen)
        return seen

    def _set(self, paused: bool, reason: Optional[str], retry_after_seconds: Optional[float]) -> None:
        if retry_after_seconds is not None:
            retry_after_seconds = _check_retry_after(retry_after_seconds)
        with self._condition:
            was_paused, self._paused = self._paused, paused
            self.reason = reason
            if retry_after_seconds is not None:
                self.retry_after_seconds = retry_after_seconds
            if paused or not was_paused:
                return
            now = time.monotonic()
            waits = [now - waiter.since for waiter in self._waiters]
            self.last_release = HoldRelease(len(waits), max(waits, default=0.0), sum(waits))
            self.held += len(waits)
            self.held_seconds += sum(waits)
            released, self._waiters = self._waiters, []
        for waiter in released:
            try:
                waiter.loop.call_soon_threadsafe(_wake, waiter.future)
            except RuntimeError:  # its event loop has closed: nobody waits any more
                pass

    def enter(self) -> bool:
        """Admit a call (True), or refuse it because the gate is paused (False; counted in `rejected`)."""
        with self._condition:
            if self._paused:
                self.rejected += 1
                return False
            self._inflight += 1
            return True

    async def enter_when_open(self, timeout: float) -> bool:
        """Admit a call, holding it (without blocking the event loop) while paused, at most `timeout` seconds.

        A held call goes on as soon as `resume()` runs (and is counted in `held` / `last_release`). False
        (counted in `rejected`) when the gate stayed paused that long.
        """
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout
        since: Optional[float] = None
        while True:
            with self._condition:
                if not self._paused:
                    self._inflight += 1
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.rejected += 1
                    return False
                waiter = _Waiter(loop, loop.create_future())
                if since is None:
                    since = waiter.since
                waiter.since = since  # paused again before it got in: its wait goes on from the first pause
                self._waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter.future, remaining)
            except asyncio.TimeoutError:
                with self._condition:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
            except BaseException:  # cancelled (the client went away): stop waiting
                with self._condition:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                raise

    @property
    def waiting(self) -> int:
        """Calls being held right now (paused, waiting in `enter_when_open`)."""
        return len(self._waiters)

    def exit(self) -> None:
        """An admitted call has finished."""
        with self._condition:
            self._inflight -= 1
            if self._inflight <= 0:
                self._inflight = 0
                self._condition.notify_all()

    def drain(self, timeout: Optional[float] = None) -> float:
        """Wait until no admitted call is running; returns the seconds waited.

        Raises:
            TimeoutError: calls were still running after `timeout` seconds.
        """
        started = time.perf_counter()
        deadline = math.inf if timeout is None else started + timeout
        with self._condition:
            while self._inflight > 0:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    raise TimeoutError(f"{self._inflight} request(s) still running after {timeout} s")
                self._condition.wait(min(remaining, 1.0))
        return time.perf_counter() - started

    def state(self) -> dict[str, Any]:
        """`{"paused", "retry_after_seconds", "reason", "inflight"}` (v1.0's PauseState)."""
        retry = self.retry_after_seconds
        return {
            "paused": self._paused,
            "retry_after_seconds": int(retry) if float(retry).is_integer() else retry,
            "reason": self.reason,
            "inflight": self._inflight,
        }

    def retry_after_header(self) -> str:
        return f"{self.retry_after_seconds:g}"


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
