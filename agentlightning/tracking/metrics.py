"""Metrics backends: counters and histograms that stores and servers report through a `tracker`.

A backend is passed as `tracker=` to stores and to `LightningStoreServer`. Metric names use dots
(`agl.http.total`); the Prometheus backend turns them into underscores. Metrics are registered on
first use when not registered explicitly, so callers can stay terse on hot paths.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from .metric_windows import Histogram, RateWindow, WindowedHistogram, histogram_entry, merged_summary, rate_entry

__all__ = [
    "MetricsBackend",
    "MetricRecorded",
    "ConsoleMetricsBackend",
    "PrometheusMetricsBackend",
    "MultiMetricsBackend",
    "DEFAULT_BUCKETS",
    "find_prometheus_backend",
]

# v0.3's logger name: its console lines are still found under `agentlightning.utils.metrics`.
LOGGER_NAME = "agentlightning.utils.metrics"
logger = logging.getLogger(LOGGER_NAME)

DEFAULT_BUCKETS: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

Labels = Optional[Mapping[str, str]]


class MetricRecorded:
    """What `inc_counter` / `observe_histogram` return: the metric is already recorded when the call returns.

    v0.3's methods are coroutines (`await backend.inc_counter(...)`); awaiting this object returns None at
    once, so v0.3 code works, and synchronous callers may ignore it.
    """

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return None
        yield  # pragma: no cover  (makes this a generator)

    def __repr__(self) -> str:
        return "MetricRecorded()"


RECORDED = MetricRecorded()


async def _await_all(pending: list[Awaitable[Any]]) -> None:
    for item in pending:
        await item


def _combine(results: Sequence[Any]) -> Awaitable[None]:
    """One awaitable for several backends' results (coroutines of v0.3-style async backends included)."""
    pending = [result for result in results if inspect.isawaitable(result) and not isinstance(result, MetricRecorded)]
    return _await_all(pending) if pending else RECORDED


@dataclass(frozen=True)
class MetricDeclaration:
    """One `register_counter` / `register_histogram` call, as a backend receives it."""

    kind: Literal["counter", "histogram"]
    name: str
    label_names: Optional[Sequence[str]]
    group_level: Optional[int]
    description: str
    buckets: Optional[Sequence[float]] = None


class MetricsBackend:
    """Where counters and histograms go (v0.3's interface).

    `inc_counter` / `observe_histogram` record synchronously and return an awaitable (`MetricRecorded`),
    so both `backend.inc_counter(...)` and v0.3's `await backend.inc_counter(...)` work. Subclasses may
    implement them as `async def`, as in v0.3; callers in this package await what they return.
    """

    def has_prometheus(self) -> bool:
        """Whether metrics reach a Prometheus registry."""
        return False

    def register_counter(
        self,
        name: str,
        label_names: Optional[Sequence[str]] = None,
        group_level: Optional[int] = None,
        *,
        description: str = "",
    ) -> None:
        """Declare a counter and its label names (their order sets the grouping of `group_level`)."""
        self._register_metric(MetricDeclaration("counter", name, label_names, group_level, description))

    def register_histogram(
        self,
        name: str,
        label_names: Optional[Sequence[str]] = None,
        buckets: Optional[Sequence[float]] = None,
        group_level: Optional[int] = None,
        *,
        description: str = "",
    ) -> None:
        """Declare a histogram (default buckets: `DEFAULT_BUCKETS`, in seconds)."""
        self._register_metric(MetricDeclaration("histogram", name, label_names, group_level, description, buckets))

    def _register_metric(self, metric: MetricDeclaration) -> None:
        """What `register_counter` / `register_histogram` do in this backend."""
        raise NotImplementedError(f"{type(self).__name__} does not implement register_{metric.kind}")

    def inc_counter(self, name: str, amount: float = 1.0, labels: Labels = None) -> Awaitable[None]:
        """Add `amount` to a counter (registered on first use with the given label names)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement inc_counter")

    def observe_histogram(self, name: str, value: float, labels: Labels = None) -> Awaitable[None]:
        """Record one observation (registered on first use with the given label names)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement observe_histogram")


LabelKey = tuple[tuple[str, str], ...]


class ConsoleMetricsBackend(MetricsBackend):
    """Aggregates metrics in memory and logs them at most every `log_interval_seconds` (v0.3's signature).

    As v0.3, the first metric event logs at once and later ones log when the interval has passed: one INFO
    line on the `agentlightning.tracking.metrics` logger, entries sorted and separated by two spaces, a counter
    as its rate over the last `window_seconds` (`agl.http.total{method=GET}=12.50/s`) and a histogram as
    P50,P95,P99 durations (`agl.http.latency=4.10ms,9.80ms,12.00ms`); see `metric_windows`.
    `snapshot()` returns the aggregates per label set: counters as totals since start, histograms as
    count/sum/mean/min/max of the observations of the last `window_seconds` (all of them with None).

    Label grouping, as v0.3: when logging, each label set is cut to its first `group_level` labels (in
    the order the metric was registered with, or first used with) and series sharing what is left are
    aggregated; with `group_level` None or < 1 every label set of a metric collapses into one line. A
    metric's own `group_level` (given at registration) applies when the backend's is None.
    `clock` (seconds, monotonic by default) is injectable for tests.
    """

    def __init__(
        self,
        window_seconds: Optional[float] = 60.0,
        log_interval_seconds: float = 10.0,
        group_level: Optional[int] = None,
        *,
        logger_name: str = LOGGER_NAME,
        clock: Optional[Callable[[], float]] = None,
    ) -> None:
        if isinstance(log_interval_seconds, bool) or not log_interval_seconds >= 0:
            raise ValueError(f"log_interval_seconds must be >= 0, got {log_interval_seconds!r}")
        if window_seconds is not None and (isinstance(window_seconds, bool) or not window_seconds > 0):
            raise ValueError(f"window_seconds must be a positive number of seconds or None, got {window_seconds!r}")
        if group_level is not None and (isinstance(group_level, bool) or not isinstance(group_level, int)):
            raise ValueError(f"group_level must be an int or None, got {group_level!r}")
        self.window_seconds = window_seconds
        self.log_interval_seconds = log_interval_seconds
        self.group_level = group_level
        self._clock = clock or time.monotonic
        self._logger = logging.getLogger(logger_name)
        self._lock = threading.Lock()
        self._label_names: dict[str, tuple[str, ...]] = {}
        self._group_levels: dict[str, Optional[int]] = {}
        self._counters: dict[str, dict[LabelKey, float]] = {}
        self._rates: dict[str, dict[LabelKey, RateWindow]] = {}
        self._histograms: dict[str, dict[LabelKey, Union[Histogram, WindowedHistogram]]] = {}
        self._last_log: Optional[float] = None

    def _declare(self, name: str, label_names: Optional[Sequence[str]], group_level: Optional[int]) -> None:
        if label_names is not None:
            self._label_names.setdefault(name, tuple(label_names))
        if group_level is not None:
            self._group_levels[name] = group_level

    def _register_metric(self, metric: MetricDeclaration) -> None:
        with self._lock:
            self._declare(metric.name, metric.label_names, metric.group_level)
            (self._counters if metric.kind == "counter" else self._histograms).setdefault(metric.name, {})

    def _key(self, name: str, labels: Labels) -> LabelKey:
        """The label pairs in the metric's label order (first use fixes it); unknown labels follow, sorted."""
        if not labels:
            return ()
        order = self._label_names.setdefault(name, tuple(labels))
        known = tuple((label, str(labels[label])) for label in order if label in labels)
        extra = tuple(sorted((k, str(v)) for k, v in labels.items() if k not in order))
        return known + extra

    def inc_counter(self, name: str, amount: float = 1.0, labels: Labels = None) -> Awaitable[None]:
        with self._lock:
            key = self._key(name, labels)
            series = self._counters.setdefault(name, {})
            series[key] = series.get(key, 0.0) + amount
            rates = self._rates.setdefault(name, {})
            window = rates.get(key)
            if window is None:
                window = rates[key] = RateWindow(self.window_seconds, self._clock)
            window.add(amount)
        self._maybe_log()
        return RECORDED

    def observe_histogram(self, name: str, value: float, labels: Labels = None) -> Awaitable[None]:
        with self._lock:
            key = self._key(name, labels)
            series = self._histograms.setdefault(name, {})
            hist = series.get(key)
            if hist is None:
                hist = series[key] = (
                    Histogram() if self.window_seconds is None else WindowedHistogram(self.window_seconds, self._clock)
                )
            hist.observe(value)
        self._maybe_log()
        return RECORDED

    def snapshot(self, *, grouped: bool = False) -> dict[str, Any]:
        """Current aggregates: `{"counters": {name: {labels: value}}, "histograms": {name: {labels: summary}}}`.

        With `grouped=True`, label sets are grouped by `group_level` as the log lines are.
        """
        with self._lock:
            counters = {name: dict(series) for name, series in self._counters.items()}
            histograms = {name: {k: h.summary() for k, h in s.items()} for name, s in self._histograms.items()}
        result: dict[str, Any] = {"counters": {}, "histograms": {}}
        for name, series in counters.items():
            merged: dict[LabelKey, float] = {}
            for key, value in series.items():
                group = self._group_key(name, key) if grouped else key
                merged[group] = merged.get(group, 0.0) + value
            result["counters"][name] = {_format_labels(k): v for k, v in merged.items()}
        for name, summaries in histograms.items():
            buckets: dict[LabelKey, list[dict[str, float]]] = {}
            for key, summary in summaries.items():
                buckets.setdefault(self._group_key(name, key) if grouped else key, []).append(summary)
            result["histograms"][name] = {_format_labels(k): merged_summary(v) for k, v in buckets.items()}
        return result

    def _group_key(self, name: str, key: LabelKey) -> LabelKey:
        level = self.group_level if self.group_level is not None else self._group_levels.get(name)
        if level is None or level < 1:
            return ()
        return key[:level]

    def log_summary(self) -> None:
        """Log every metric now, in one line (v0.3's format), label sets grouped by `group_level`."""
        now = self._clock()
        with self._lock:
            rates = {name: [(k, w.events()) for k, w in series.items()] for name, series in self._rates.items()}
            values = {name: [(k, h.values()) for k, h in series.items()] for name, series in self._histograms.items()}
        entries: list[str] = []
        for name, counted in rates.items():
            grouped: dict[LabelKey, list[tuple[float, float]]] = {}
            for key, events in counted:
                if events is not None:
                    grouped.setdefault(self._group_key(name, key), []).append(events)
            for key, group in grouped.items():
                label = name + _format_labels(key)
                entries.append(rate_entry(label, group, now, self.window_seconds, self.log_interval_seconds))
        for name, observed in values.items():
            samples: dict[LabelKey, list[float]] = {}
            for key, recent in observed:
                if recent:
                    samples.setdefault(self._group_key(name, key), []).extend(recent)
            entries.extend(histogram_entry(name + _format_labels(key), group) for key, group in samples.items())
        if entries:
            entries.sort()
            self._logger.info("  ".join(entries))

    def _maybe_log(self) -> None:
        now = self._clock()
        with self._lock:
            if self._last_log is not None and now - self._last_log < self.log_interval_seconds:
                return
            self._last_log = now
        self.log_summary()


def _format_labels(key: LabelKey) -> str:
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

    def has_prometheus(self) -> bool:
        return True

    def _register_metric(self, metric: MetricDeclaration) -> None:
        label_names = tuple(metric.label_names or ())
        self._get_or_create(metric.kind, metric.name, label_names, metric.description, metric.buckets)

    def inc_counter(self, name: str, amount: float = 1.0, labels: Labels = None) -> Awaitable[None]:
        collector = self._collectors.get(name)
        if collector is None:
            collector = self._get_or_create("counter", name, tuple(sorted(labels or ())), "", None)
        (collector.labels(**labels) if labels else collector).inc(amount)
        return RECORDED

    def observe_histogram(self, name: str, value: float, labels: Labels = None) -> Awaitable[None]:
        collector = self._collectors.get(name)
        if collector is None:
            collector = self._get_or_create("histogram", name, tuple(sorted(labels or ())), "", None)
        (collector.labels(**labels) if labels else collector).observe(value)
        return RECORDED

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

    def has_prometheus(self) -> bool:
        return any(backend.has_prometheus() for backend in self.backends)

    def _register_metric(self, metric: MetricDeclaration) -> None:
        for backend in self.backends:
            method = (
                backend.register_counter
                if metric.kind == "counter"
                else functools.partial(backend.register_histogram, buckets=metric.buckets)
            )
            _register(method, metric.name, metric.label_names, metric.group_level, metric.description)

    def inc_counter(self, name: str, amount: float = 1.0, labels: Labels = None) -> Awaitable[None]:
        return _combine([backend.inc_counter(name, amount, labels) for backend in self.backends])

    def observe_histogram(self, name: str, value: float, labels: Labels = None) -> Awaitable[None]:
        return _combine([backend.observe_histogram(name, value, labels) for backend in self.backends])


def _register(
    method: Callable[..., None],
    name: str,
    label_names: Optional[Sequence[str]],
    group_level: Optional[int],
    description: str,
) -> None:
    """Call a backend's register method; v0.3-style backends take no `description`."""
    try:
        accepts_description = "description" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        accepts_description = False
    extra = {"description": description} if accepts_description else {}
    method(name, label_names=label_names, group_level=group_level, **extra)


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
