"""Metrics backends: console aggregation, Prometheus exposition, fan-out."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Optional

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agentlightning.tracking.metrics import (
    ConsoleMetricsBackend,
    MetricsBackend,
    MultiMetricsBackend,
    PrometheusMetricsBackend,
    find_prometheus_backend,
)

LOGGER = "agentlightning.utils.metrics"  # v0.3's logger name


def test_console_backend_aggregates_per_label_set(caplog: pytest.LogCaptureFixture) -> None:
    console = ConsoleMetricsBackend(log_interval_seconds=3600, group_level=1)
    console.register_counter("agl.rollouts.total", ["method"])
    console.inc_counter("agl.rollouts.total", labels={"method": "enqueue"})
    console.inc_counter("agl.rollouts.total", 2, labels={"method": "enqueue"})
    console.inc_counter("agl.rollouts.total", labels={"method": "dequeue"})
    for value in (0.1, 0.3):
        console.observe_histogram("agl.rollouts.duration", value, labels={"method": "enqueue"})
    snapshot = console.snapshot()
    assert snapshot["counters"]["agl.rollouts.total"] == {"{method=enqueue}": 3.0, "{method=dequeue}": 1.0}
    summary = snapshot["histograms"]["agl.rollouts.duration"]["{method=enqueue}"]
    assert summary["count"] == 2 and summary["min"] == 0.1 and summary["max"] == 0.3
    assert summary["mean"] == pytest.approx(0.2)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        console.log_summary()
    assert "agl.rollouts.total{method=enqueue}=" in caplog.text  # a rate (see the v0.3 format test)


def test_console_backend_logs_on_its_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [50.0]
    console = ConsoleMetricsBackend(log_interval_seconds=0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger=LOGGER):
        console.inc_counter("agl.http.total")
        now[0] += 2
        console.inc_counter("agl.http.total")
    assert caplog.messages == ["agl.http.total=1000.00/s", "agl.http.total=1.00/s"]


def test_console_backend_logs_rates_and_percentiles_as_v03(caplog: pytest.LogCaptureFixture) -> None:
    """v0.3's log: the first event logs at once, then at most every interval; one line, entries sorted and
    two spaces apart, counters as rates over the window and histograms as P50,P95,P99 durations."""
    now = [1000.0]
    console = ConsoleMetricsBackend(window_seconds=60, log_interval_seconds=10, group_level=1, clock=lambda: now[0])
    console.register_counter("agl.http.total", ["method", "path"])
    console.register_histogram("agl.http.latency", ["method", "path"])
    with caplog.at_level(logging.INFO, logger=LOGGER):
        console.inc_counter("agl.http.total", labels={"method": "GET", "path": "/a"})
        assert caplog.messages == ["agl.http.total{method=GET}=0.10/s"]  # 1 event over at least the interval
        now[0] = 1005.0
        for _ in range(4):
            console.inc_counter("agl.http.total", labels={"method": "GET", "path": "/b"})
        console.inc_counter("agl.http.total", labels={"method": "POST", "path": "/a"})
        for i in range(1, 12):
            console.observe_histogram("agl.http.latency", i / 1000, labels={"method": "GET", "path": f"/{i % 2}"})
        assert len(caplog.messages) == 1  # the interval has not passed
        now[0] = 1010.0
        console.inc_counter("agl.http.total", labels={"method": "POST", "path": "/b"})
        assert caplog.messages[1] == (
            "agl.http.latency{method=GET}=6.00ms,10.50ms,10.90ms  "
            "agl.http.total{method=GET}=0.50/s  agl.http.total{method=POST}=0.20/s"
        )
        now[0] = 1100.0  # everything above left the 60 s window
        console.inc_counter("agl.http.total", labels={"method": "GET", "path": "/a"})
    assert caplog.messages[2] == "agl.http.total{method=GET}=0.10/s"
    assert console.snapshot(grouped=True)["counters"]["agl.http.total"] == {"{method=GET}": 6.0, "{method=POST}": 2.0}


def test_console_backend_without_a_window_rates_since_the_first_event(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    console = ConsoleMetricsBackend(window_seconds=None, log_interval_seconds=1, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger=LOGGER):
        console.observe_histogram("step.seconds", 2.0)
        now[0] = 100.0
        console.inc_counter("steps", 50)  # first counter event at t=100
        now[0] = 200.0
        console.observe_histogram("step.seconds", 4.0)
    assert caplog.messages[-1] == "step.seconds=3.00s,3.90s,3.98s  steps=0.50/s"


def test_prometheus_backend_exposes_dotted_names_with_underscores() -> None:
    registry = CollectorRegistry()
    backend = PrometheusMetricsBackend(registry=registry)
    backend.register_histogram("agl.http.latency", ["path"], buckets=[0.1, 1.0])
    backend.observe_histogram("agl.http.latency", 0.05, labels={"path": "/x"})
    backend.inc_counter("agl.spans.total", labels={"method": "add_span"})  # registered on first use
    text = generate_latest(registry).decode()
    assert 'agl_http_latency_bucket{le="0.1",path="/x"} 1.0' in text
    assert 'agl_spans_total{method="add_span"} 1.0' in text
    # A second backend on the same registry shares the collectors instead of failing as a duplicate.
    PrometheusMetricsBackend(registry=registry).inc_counter("agl.spans.total", labels={"method": "add_span"})
    assert 'agl_spans_total{method="add_span"} 2.0' in generate_latest(registry).decode()


def test_multi_backend_fans_out() -> None:
    first, second = ConsoleMetricsBackend(log_interval_seconds=3600), ConsoleMetricsBackend(log_interval_seconds=3600)
    prometheus = PrometheusMetricsBackend(registry=CollectorRegistry())
    multi = MultiMetricsBackend([first, MultiMetricsBackend([second, prometheus])])
    multi.register_counter("c", ["k"])
    multi.register_histogram("h", ["k"])
    multi.inc_counter("c", labels={"k": "v"})
    multi.observe_histogram("h", 1.0, labels={"k": "v"})
    for backend in (first, second):
        assert backend.snapshot()["counters"]["c"] == {"{k=v}": 1.0}
        assert backend.snapshot()["histograms"]["h"]["{k=v}"]["count"] == 1
    assert find_prometheus_backend(multi) is prometheus
    assert find_prometheus_backend(first) is None
    with pytest.raises(ValueError, match="at least one"):
        MultiMetricsBackend([])


def test_console_backend_window_seconds_summarises_recent_observations_only() -> None:
    now = [100.0]
    console = ConsoleMetricsBackend(log_interval_seconds=3600, window_seconds=10, clock=lambda: now[0])
    assert console.window_seconds == 10
    console.observe_histogram("agl.http.latency", 5.0)
    now[0] += 6
    console.observe_histogram("agl.http.latency", 1.0)
    console.inc_counter("agl.http.total")
    summary = console.snapshot()["histograms"]["agl.http.latency"][""]
    assert (summary["count"], summary["max"], summary["min"]) == (2, 5.0, 1.0)
    now[0] += 5  # the first observation is now 11 s old
    summary = console.snapshot()["histograms"]["agl.http.latency"][""]
    assert (summary["count"], summary["mean"]) == (1, 1.0)
    now[0] += 60
    assert console.snapshot()["histograms"]["agl.http.latency"][""]["count"] == 0
    assert console.snapshot()["counters"]["agl.http.total"][""] == 1.0  # counters stay totals


def test_console_backend_rejects_a_bad_window() -> None:
    for bad in (0, -1.0, True):
        with pytest.raises(ValueError, match="window_seconds"):
            ConsoleMetricsBackend(window_seconds=bad)


def test_console_backend_takes_v03_positional_arguments_and_group_level(caplog: pytest.LogCaptureFixture) -> None:
    console = ConsoleMetricsBackend(30.0, 3600, 1)  # v0.3's order: window_seconds, log_interval_seconds, group_level
    assert (console.window_seconds, console.log_interval_seconds, console.group_level) == (30.0, 3600, 1)
    console.register_counter("agl.http.total", ["method", "path"])
    for method, path in (("GET", "/a"), ("GET", "/b"), ("POST", "/a")):
        console.inc_counter("agl.http.total", labels={"path": path, "method": method})
    # Label sets are kept in registration order; grouping keeps the first `group_level` labels.
    assert console.snapshot()["counters"]["agl.http.total"] == {
        "{method=GET,path=/a}": 1.0,
        "{method=GET,path=/b}": 1.0,
        "{method=POST,path=/a}": 1.0,
    }
    assert console.snapshot(grouped=True)["counters"]["agl.http.total"] == {"{method=GET}": 2.0, "{method=POST}": 1.0}
    with caplog.at_level(logging.INFO, logger=LOGGER):
        console.log_summary()
    assert "agl.http.total{method=GET}=" in caplog.text and "agl.http.total{method=POST}=" in caplog.text
    assert "path=" not in caplog.text


def test_group_level_none_collapses_label_sets_and_per_metric_levels_apply() -> None:
    console = ConsoleMetricsBackend(log_interval_seconds=3600)
    console.register_histogram("lat", ["path", "status"], group_level=2)
    console.register_counter("total", ["path"])
    for path, value in (("/a", 0.1), ("/b", 0.3)):
        console.observe_histogram("lat", value, labels={"path": path, "status": "200"})
        console.inc_counter("total", labels={"path": path})
    grouped = console.snapshot(grouped=True)
    assert grouped["counters"]["total"] == {"": 2.0}
    assert set(grouped["histograms"]["lat"]) == {"{path=/a,status=200}", "{path=/b,status=200}"}
    console.group_level = 0  # the backend's level wins over the metric's
    merged = console.snapshot(grouped=True)["histograms"]["lat"][""]
    assert (merged["count"], merged["min"], merged["max"]) == (2, 0.1, 0.3)
    with pytest.raises(ValueError, match="group_level"):
        ConsoleMetricsBackend(group_level="2")  # type: ignore[arg-type]


async def test_inc_counter_and_observe_histogram_are_awaitable_as_in_v03() -> None:
    console = ConsoleMetricsBackend(log_interval_seconds=3600)
    prometheus = PrometheusMetricsBackend(registry=CollectorRegistry())
    multi = MultiMetricsBackend([console, prometheus])
    assert multi.has_prometheus() and not console.has_prometheus()
    assert await multi.inc_counter("c", labels={"k": "v"}) is None
    assert await multi.observe_histogram("h", 0.5, labels={"k": "v"}) is None
    # Recorded at call time: a synchronous caller that never awaits loses nothing.
    console.inc_counter("c", labels={"k": "v"})
    assert console.snapshot()["counters"]["c"] == {"{k=v}": 2.0}


class AsyncBackend(MetricsBackend):
    """A backend written the v0.3 way: `async def` recording methods, no `description` keyword."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}
        self.observations: list[float] = []

    def register_counter(  # type: ignore[override]
        self, name: str, label_names: Optional[Sequence[str]] = None, group_level: Optional[int] = None
    ) -> None:
        self.counts.setdefault(name, 0.0)

    def register_histogram(  # type: ignore[override]
        self,
        name: str,
        label_names: Optional[Sequence[str]] = None,
        buckets: Optional[Sequence[float]] = None,
        group_level: Optional[int] = None,
    ) -> None:
        pass

    async def inc_counter(self, name: str, amount: float = 1.0, labels: Optional[Mapping[str, str]] = None) -> None:
        self.counts[name] = self.counts.get(name, 0.0) + amount

    async def observe_histogram(self, name: str, value: float, labels: Optional[Mapping[str, str]] = None) -> None:
        self.observations.append(value)


async def test_v03_style_async_backends_are_awaited_by_the_store_and_multi_backend() -> None:
    from agentlightning.store.memory import InMemoryLightningStore

    backend = AsyncBackend()
    multi = MultiMetricsBackend([backend, ConsoleMetricsBackend(log_interval_seconds=3600)])
    multi.register_counter("c", ["k"], description="described")
    await multi.inc_counter("c", 2.0)
    assert backend.counts["c"] == 2.0
    store = InMemoryLightningStore(tracker=backend)
    await store.enqueue_rollout(input={"x": 1})
    assert backend.counts.get("agl.rollouts.total") == 1.0
    assert len(backend.observations) == 1
