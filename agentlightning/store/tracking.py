"""Prometheus-style call tracking for store methods: `agl.<group>.total` and `agl.<group>.duration`.

The tracker is any metrics backend with `register_counter`, `register_histogram`, `inc_counter` and
`observe_histogram` (see `agentlightning.tracking.metrics`); without one, tracking costs one attribute read.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Any, Awaitable, Callable, TypeVar, cast

from .utils import LATENCY_BUCKETS

__all__ = ["tracked", "register_store_metrics", "METRIC_GROUPS"]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

METRIC_GROUPS: tuple[str, ...] = ("rollouts", "attempts", "spans", "resources", "workers", "store")
_LABELS = ("method", "status")


def register_store_metrics(tracker: Any) -> None:
    """Declare every counter and histogram the store reports, once per tracker."""
    for group in METRIC_GROUPS:
        tracker.register_counter(f"agl.{group}.total", list(_LABELS))
        tracker.register_histogram(f"agl.{group}.duration", list(_LABELS), buckets=LATENCY_BUCKETS)


def tracked(group: str) -> Callable[[F], F]:
    """Count calls and their latency under `agl.<group>.*`, labelled with the method and ok/error."""
    if group not in METRIC_GROUPS:
        raise ValueError(f"unknown metric group {group!r}; expected one of {', '.join(METRIC_GROUPS)}")

    def decorate(method: F) -> F:
        name = method.__name__

        @functools.wraps(method)
        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            tracker = getattr(self, "_tracker", None)
            if tracker is None:
                return await method(self, *args, **kwargs)
            started = time.perf_counter()
            status = "error"
            try:
                result = await method(self, *args, **kwargs)
                status = "ok"
                return result
            finally:
                labels = {"method": name, "status": status}
                try:
                    # Awaited: v0.3-style backends implement these as coroutines.
                    await tracker.inc_counter(f"agl.{group}.total", labels=labels)
                    await tracker.observe_histogram(
                        f"agl.{group}.duration", time.perf_counter() - started, labels=labels
                    )
                except Exception:
                    # Metrics must never fail a store call.
                    logger.debug("store metrics tracking failed", exc_info=True)

        return cast(F, wrapper)

    return decorate
