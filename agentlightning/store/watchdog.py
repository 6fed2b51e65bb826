"""The store-side watchdog: a debounced scan that marks stale attempts `timeout` / `unresponsive`.

Backends own the scan itself (what "running rollouts" means is storage-specific) and decide each verdict
with `store.utils.unhealthy_attempt_status`; this module owns *when* it runs: before most public store
calls, at most once per `debounce_seconds`, never recursively.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import time
from typing import Any, Awaitable, Callable, Optional, TypeVar, cast

from .utils import Clock

__all__ = ["Watchdog", "healthcheck_before"]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_in_scan: contextvars.ContextVar[bool] = contextvars.ContextVar("agl_store_in_scan", default=False)


class Watchdog:
    """Runs `scan(now)` before store calls, debounced on the store's clock."""

    def __init__(
        self,
        scan: Callable[[float], Awaitable[None]],
        *,
        clock: Optional[Clock] = None,
        debounce_seconds: float = 10.0,
    ) -> None:
        if debounce_seconds < 0:
            raise ValueError(f"scan_debounce_seconds must be >= 0, got {debounce_seconds}")
        self._scan = scan
        self._clock = clock or time.time
        self.debounce_seconds = debounce_seconds
        self._last_scan: Optional[float] = None

    def due(self) -> bool:
        """Whether a scan would run now (checked before every store call, so without a coroutine)."""
        last = self._last_scan
        return last is None or self.debounce_seconds <= 0 or self._clock() - last >= self.debounce_seconds

    async def maybe_scan(self) -> None:
        if _in_scan.get():
            return
        now = self._clock()
        if self._last_scan is not None and self.debounce_seconds > 0 and now - self._last_scan < self.debounce_seconds:
            return
        self._last_scan = now
        token = _in_scan.set(True)
        try:
            await self._scan(now)
        except Exception:
            # A failed scan must not fail the caller's request; the next call retries it.
            logger.exception("store watchdog scan failed")
            self._last_scan = None
        finally:
            _in_scan.reset(token)

    async def scan_now(self) -> None:
        """Scan regardless of debouncing (tests and shutdown paths)."""
        self._last_scan = None
        await self.maybe_scan()


def healthcheck_before(method: F) -> F:
    """Decorate an async store method so the store's `_watchdog` (if any) gets a chance to scan first."""

    @functools.wraps(method)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        watchdog: Optional[Watchdog] = getattr(self, "_watchdog", None)
        if watchdog is not None and watchdog.due():
            await watchdog.maybe_scan()
        return await method(self, *args, **kwargs)

    return cast(F, wrapper)
