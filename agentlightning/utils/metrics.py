"""Metrics backends: counters and histograms that stores and servers report through a `tracker`.

A backend is passed as `tracker=` to stores and to `LightningStoreServer`. Metric names use dots
(`agl.http.total`); the Prometheus backend turns them into underscores. Metrics are registered on
first use when not registered explicitly, so callers can stay terse on hot paths.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, Union

__all__ = [
    "MetricsBackend",
    "ConsoleMetricsBackend",
    "PrometheusMetricsBackend",
    "MultiMetricsBackend",
    "DEFAULT_BUCKETS",
    "find_prometheus_backend",
]

logger = logging.getLogger(__name__)

DEFAULT_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

Labels = Optional[Mapping[str, str]]


class MetricsBackend(ABC):
    """Where counters and histograms go. Methods are synchronous and cheap: they sit on hot paths."""

    @abstractmethod
    def register_counter(self, name: str, label_names: Sequence[str] = (), description: str = "") -> None:
        """Declare a counter and the label names it is recorded with."""

    @abstractmethod
    def register_histogram(
        self,
        name: str,
        label_names: Sequence[str] = (),
        buckets: Optional[Sequence[float]] = None,
        description: str = "",
    ) -> None:
        """Declare a histogram (default buckets: `DEFAULT_BUCKETS`, in seconds)."""

    @abstractmethod
    def inc_counter(self, name: str, amount: float = 1.0, labels: Labels = None) -> None:
        """Add `amount` to a counter (registered on first use with the given label names)."""

    @abstractmethod
    def observe_histogram(self, name: str, value: float, labels: Labels = None) -> None:
        """Record one observation (registered on first use with the given label names)."""


class _Histogram:
    __slots__ = ("count", "total", "minimum", "maximum")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.minimum = float("inf")
        self.maximum = float("-inf")

    def observe(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)

    def summary(self) -> dict[str, float]:
        if self.count == 0:
            return {"count": 0, "sum": 0.0, "mean": 0.0, "min": 0.0, "max": 0.0}
        return {
            "count": self.count,
            "sum": self.total,
            "mean": self.total / self.count,
            "min": self.minimum,
            "max": self.maximum,
        }


class _WindowedHistogram:
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
        self._prune(self.clock())
        window = _Histogram()
        for _, value in self.samples:
            window.observe(value)
        return window.summary()


def _label_key(labels: Labels) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items())) if labels else ()


class ConsoleMetricsBackend(MetricsBackend):
    """Aggregates metrics in memory and logs a summary at most every `log_interval_seconds`.

    Useful for local runs without a Prometheus server; `snapshot()` returns the aggregates. Counters are
    totals since start. Histograms summarise every observation, or with `window_seconds` only those of the
    last `window_seconds` (recent latency rather than the whole run's). `clock` (seconds, monotonic by
    default) is injectable for tests.
    """

    def __init__(
        self,
        log_interval_seconds: float = 30.0,
        logger_name: str = "agentlightning.metrics",
        *,
        window_seconds: Optional[float] = None,
        clock: Optional[Callable[[], float]] = None,
    ) -> None:
        if log_interval_seconds < 0:
            raise ValueError(f"log_interval_seconds must be >= 0, got {log_interval_seconds}")
        if window_seconds is not None and (isinstance(window_seconds, bool) or not window_seconds > 0):
            raise ValueError(f"window_seconds must be a positive number of seconds or None, got {window_seconds!r}")
        self.log_interval_seconds = log_interval_seconds
        self.window_seconds = window_seconds
        self._clock = clock or time.monotonic
        self._logger = logging.getLogger(logger_name)
        self._lock = threading.Lock()
        self._counters: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        self._histograms: dict[str, dict[tuple[tuple[str, str], ...], Union[_Histogram, _WindowedHistogram]]] = {}
        self._last_log = self._clock()

    def register_counter(self, name: str, label_names: Sequence[str] = (), description: str = "") -> None:
        with self._lock:
            self._counters.setdefault(name, {})

    def register_histogram(
        self,
        name: str,
        label_names: Sequence[str] = (),
        buckets: Optional[Sequence[float]] = None,
        description: str = "",
    ) -> None:
        with self._lock:
            self._histograms.setdefault(name, {})

    def inc_counter(self, name: str, amount: float = 1.0, labels: Labels = None) -> None:
        key = _label_key(labels)
        with self._lock:
            series = self._counters.setdefault(name, {})
            series[key] = series.get(key, 0.0) + amount
        self._maybe_log()

    def observe_histogram(self, name: str, value: float, labels: Labels = None) -> None:
        key = _label_key(labels)
        with self._lock:
            series = self._histograms.setdefault(name, {})
            hist = series.get(key)
            if hist is None:
                hist = series[key] = (
                    _Histogram()
                    if self.window_seconds is None
                    else _WindowedHistogram(self.window_seconds, self._clock)
                )
            hist.observe(value)
        self._maybe_log()

    def snapshot(self) -> dict[str, Any]:
        """Current aggregates: `{"counters": {name: {labels: value}}, "histograms": {name: {labels: summary}}}`."""
        with self._lock:
            return {
                "counters": {name: {_format_labels(k): v for k, v in s.items()} for name, s in self._counters.items()},
                "histograms": {
                    name: {_format_labels(k): h.summary() for k, h in s.items()} for name, s in self._histograms.items()
                },
            }

    def log_summary(self) -> None:
        """Log every metric now."""
        snap = self.snapshot()
        for name, series in snap["counters"].items():
            for labels, value in series.items():
                self._logger.info("%s%s = %g", name, labels, value)
        for name, series in snap["histograms"].items():
            for labels, s in series.items():
                self._logger.info(
                    "%s%s count=%d mean=%.6g min=%.6g max=%.6g", name, labels, s["count"], s["mean"], s["min"], s["max"]
                )

    def _maybe_log(self) -> None:
        now = self._clock()
        if now - self._last_log < self.log_interval_seconds:
            return
        self._last_log = now
        self.log_summary()


def _format_labels(key: tuple[tuple[str, str], ...]) -> str:
    if not key:
        return ""
    return "{" + ",".join(f"{k}={v}" for k, v in key) + "}"


def _prometheus_name(name: str) -> str:
    return name.replace(".", "_").replace("-", "_")


# Collectors per registry, so two backends on the same registry (e.g. the process-global one) share
# metrics instead of failing with "Duplicated timeseries".
_COLLECTORS: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_COLLECTORS_LOCK = threading.Lock()


class PrometheusMetricsBackend(MetricsBackend):
    """Prometheus counters/histograms (needs `pip install agentlightning[prometheus]`).

    Uses the process-global registry unless one is given. With `PROMETHEUS_MULTIPROC_DIR` set,
    prometheus-client writes values to that directory and `agl prometheus` serves them.
    """

    def __init__(self, registry: Any = None) -> None:
        try:
            import prometheus_client
        except ImportError as exc:
            raise ImportError(
                "PrometheusMetricsBackend needs prometheus-client; install it with "
                "`pip install agentlightning[prometheus]`"
            ) from exc
        self._prom = prometheus_client
        self.registry = registry if registry is not None else prometheus_client.REGISTRY
        with _COLLECTORS_LOCK:
            self._collectors = _COLLECTORS.setdefault(self.registry, {})

    def register_counter(self, name: str, label_names: Sequence[str] = (), description: str = "") -> None:
        self._get_or_create("counter", name, tuple(label_names), description, None)

    def register_histogram(
        self,
        name: str,
        label_names: Sequence[str] = (),
        buckets: Optional[Sequence[float]] = None,
        description: str = "",
    ) -> None:
        self._get_or_create("histogram", name, tuple(label_names), description, buckets)

    def inc_counter(self, name: str, amount: float = 1.0, labels: Labels = None) -> None:
        collector = self._collectors.get(name)
        if collector is None:
            collector = self._get_or_create("counter", name, tuple(sorted(labels or ())), "", None)
        (collector.labels(**labels) if labels else collector).inc(amount)

    def observe_histogram(self, name: str, value: float, labels: Labels = None) -> None:
        collector = self._collectors.get(name)
        if collector is None:
            collector = self._get_or_create("histogram", name, tuple(sorted(labels or ())), "", None)
        (collector.labels(**labels) if labels else collector).observe(value)

    def _get_or_create(
        self,
        kind: str,
        name: str,
        label_names: tuple[str, ...],
        description: str,
        buckets: Optional[Sequence[float]],
    ) -> Any:
        with _COLLECTORS_LOCK:
            existing = self._collectors.get(name)
            if existing is not None:
                return existing
            doc = description or name
            if kind == "counter":
                collector = self._prom.Counter(
                    _prometheus_name(name), doc, labelnames=label_names, registry=self.registry
                )
            else:
                collector = self._prom.Histogram(
                    _prometheus_name(name),
                    doc,
                    labelnames=label_names,
                    buckets=tuple(buckets) if buckets else DEFAULT_BUCKETS,
                    registry=self.registry,
                )
            self._collectors[name] = collector
            return collector


class MultiMetricsBackend(MetricsBackend):
    """Fans every call out to several backends (e.g. console and Prometheus at once)."""

    def __init__(self, backends: Sequence[MetricsBackend]) -> None:
        if not backends:
            raise ValueError("MultiMetricsBackend needs at least one backend")
        self.backends: tuple[MetricsBackend, ...] = tuple(backends)

    def register_counter(self, name: str, label_names: Sequence[str] = (), description: str = "") -> None:
        for backend in self.backends:
            backend.register_counter(name, label_names, description)

    def register_histogram(
        self,
        name: str,
        label_names: Sequence[str] = (),
        buckets: Optional[Sequence[float]] = None,
        description: str = "",
    ) -> None:
        for backend in self.backends:
            backend.register_histogram(name, label_names, buckets, description)

    def inc_counter(self, name: str, amount: float = 1.0, labels: Labels = None) -> None:
        for backend in self.backends:
            backend.inc_counter(name, amount, labels)

    def observe_histogram(self, name: str, value: float, labels: Labels = None) -> None:
        for backend in self.backends:
            backend.observe_histogram(name, value, labels)


def find_prometheus_backend(tracker: Optional[MetricsBackend]) -> Optional[PrometheusMetricsBackend]:
    """The Prometheus backend inside `tracker` (itself or one of a `MultiMetricsBackend`), if any."""
    if isinstance(tracker, PrometheusMetricsBackend):
        return tracker
    if isinstance(tracker, MultiMetricsBackend):
        for backend in tracker.backends:
            found = find_prometheus_backend(backend)
            if found is not None:
                return found
    return None
