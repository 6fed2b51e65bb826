"""Metrics backends: console aggregation, Prometheus exposition, fan-out."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agentlightning.utils.metrics import (
    ConsoleMetricsBackend,
    MultiMetricsBackend,
    PrometheusMetricsBackend,
    find_prometheus_backend,
)


def test_console_backend_aggregates_per_label_set(caplog: pytest.LogCaptureFixture) -> None:
    console = ConsoleMetricsBackend(log_interval_seconds=3600)
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
    with caplog.at_level(logging.INFO, logger="agentlightning.metrics"):
        console.log_summary()
    assert "agl.rollouts.total{method=enqueue} = 3" in caplog.text


def test_console_backend_logs_on_its_interval(caplog: pytest.LogCaptureFixture) -> None:
    console = ConsoleMetricsBackend(log_interval_seconds=0)
    with caplog.at_level(logging.INFO, logger="agentlightning.metrics"):
        console.inc_counter("agl.http.total")
    assert "agl.http.total = 1" in caplog.text


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
    first, second = ConsoleMetricsBackend(3600), ConsoleMetricsBackend(3600)
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
