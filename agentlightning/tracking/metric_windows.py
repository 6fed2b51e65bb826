"""The aggregates behind `ConsoleMetricsBackend`, and v0.3's console log entries.

Counters keep a total (for `snapshot()`) and a rate window: their increments of the last `window_seconds`
in one-second buckets, so memory stays bounded whatever the rate. Histograms keep count/sum/min/max and
the values percentiles are computed from: those of the last `window_seconds`, or, without a window, the
latest `PERCENTILE_SAMPLES` (v0.3 kept every value forever). A log line holds one entry per metric and
label group, as v0.3 wrote them: `name{labels}=1.50/s` for a counter, `name{labels}=P50,P95,P99` with
durations for a histogram (`name{labels}=12.00ms,40.00ms,1.20s`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Optional

__all__ = [
    "PERCENTILE_SAMPLES",
    "Histogram",
    "WindowedHistogram",
    "RateWindow",
    "merged_summary",
    "percentile",
    "format_duration",
    "rate_entry",
    "histogram_entry",
]

PERCENTILE_SAMPLES = 10_000
"""Without a window, percentiles are computed over this many latest values."""


def _empty_summary() -> dict[str, float]:
    return {"count": 0, "sum": 0.0, "mean": 0.0, "min": 0.0, "max": 0.0}


class Histogram:
    """All-time count/sum/min/max, plus the latest `PERCENTILE_SAMPLES` values for percentiles."""

    __slots__ = ("count", "total", "minimum", "maximum", "recent")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.minimum = float("inf")
        self.maximum = float("-inf")
        self.recent: deque[float] = deque(maxlen=PERCENTILE_SAMPLES)

    def observe(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)
        self.recent.append(value)

    def summary(self) -> dict[str, float]:
        if self.count == 0:
            return _empty_summary()
        return {
            "count": self.count,
            "sum": self.total,
            "mean": self.total / self.count,
            "min": self.minimum,
            "max": self.maximum,
        }

    def values(self) -> list[float]:
        return list(self.recent)


class WindowedHistogram:
    """Observations of the last `window_seconds` only (older ones are forgotten as time passes)."""

    __slots__ = ("window_seconds", "clock", "samples")

    def __init__(self, window_seconds: float, clock: Callable[[], float]) -> None:
        self.window_seconds = window_seconds
        self.clock = clock
        self.samples: deque[tuple[float, float]] = deque()

    def _prune(self, now: float) -> None:
        horizon = now - self.window_seconds
        while self.samples and self.samples[0][0] < horizon:
            self.samples.popleft()

    def observe(self, value: float) -> None:
        now = self.clock()
        self.samples.append((now, value))
        self._prune(now)

    def summary(self) -> dict[str, float]:
        window = Histogram()
        for value in self.values():
            window.observe(value)
        return window.summary()

    def values(self) -> list[float]:
        self._prune(self.clock())
        return [value for _, value in self.samples]


class RateWindow:
    """A counter's increments of the last `window_seconds` (all of them with None), in one-second buckets."""

    __slots__ = ("window_seconds", "clock", "buckets", "first_time", "total")

    def __init__(self, window_seconds: Optional[float], clock: Callable[[], float]) -> None:
        self.window_seconds = window_seconds
        self.clock = clock
        self.buckets: deque[list[float]] = deque()  # [second, first event time in it, amount]
        self.first_time: Optional[float] = None
        self.total = 0.0

    def add(self, amount: float) -> None:
        now = self.clock()
        if self.window_seconds is None:
            self.first_time = now if self.first_time is None else self.first_time
            self.total += amount
            return
        second = float(math.floor(now))
        if self.buckets and self.buckets[-1][0] == second:
            self.buckets[-1][2] += amount
        else:
            self.buckets.append([second, now, amount])
        self._prune(now)

    def _prune(self, now: float) -> None:
        assert self.window_seconds is not None
        horizon = now - self.window_seconds
        while self.buckets and self.buckets[0][0] + 1.0 <= horizon:  # the bucket's whole second is too old
            self.buckets.popleft()

    def events(self) -> Optional[tuple[float, float]]:
        """(time of the first increment still counted, their sum), or None when there is none."""
        if self.window_seconds is None:
            return None if self.first_time is None else (self.first_time, self.total)
        self._prune(self.clock())
        if not self.buckets:
            return None
        return self.buckets[0][1], sum(bucket[2] for bucket in self.buckets)


def merged_summary(summaries: Sequence[dict[str, float]]) -> dict[str, float]:
    count = sum(int(item["count"]) for item in summaries)
    if count == 0:
        return _empty_summary()
    total = sum(item["sum"] for item in summaries)
    filled = [item for item in summaries if item["count"]]
    return {
        "count": count,
        "sum": total,
        "mean": total / count,
        "min": min(item["min"] for item in filled),
        "max": max(item["max"] for item in filled),
    }


def percentile(ordered: Sequence[float], p: float) -> float:
    """The `p`-th percentile (0-100) of sorted values, interpolating linearly between ranks (as v0.3)."""
    n = len(ordered)
    if n == 1:
        return ordered[0]
    position = (p / 100.0) * (n - 1)
    low = int(position)
    high = min(low + 1, n - 1)
    if low == high:
        return ordered[low]
    weight = position - low
    return ordered[low] * (1 - weight) + ordered[high] * weight


def format_duration(value: float) -> str:
    """`1.20s`, `12.00ms`, `3.00µs` or `5.00ns` (v0.3's histogram units)."""
    magnitude = abs(value)
    if magnitude >= 1.0:
        return f"{value:.2f}s"
    if magnitude >= 1e-3:
        return f"{value * 1_000:.2f}ms"
    if magnitude >= 1e-6:
        return f"{value * 1_000_000:.2f}µs"
    return f"{value * 1_000_000_000:.2f}ns"


def rate_entry(
    label: str,
    events: Sequence[tuple[float, float]],
    now: float,
    window_seconds: Optional[float],
    log_interval_seconds: float,
) -> str:
    """`label=R/s`: the increments per second since the first one counted (within the window), over at
    least `log_interval_seconds` (so a burst right after start is not read as a huge rate)."""
    first = min(time for time, _ in events)
    total = sum(amount for _, amount in events)
    start = first if window_seconds is None else max(first, now - window_seconds)
    duration = max(now - start, log_interval_seconds if log_interval_seconds > 0 else 1e-3)
    return f"{label}={total / duration:.2f}/s"


def histogram_entry(label: str, values: Sequence[float]) -> str:
    """`label=P50,P95,P99`, each formatted as a duration."""
    ordered = sorted(values)
    return f"{label}=" + ",".join(format_duration(percentile(ordered, p)) for p in (50.0, 95.0, 99.0))
