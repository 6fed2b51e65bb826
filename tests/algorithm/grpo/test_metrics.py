"""Metrics JSONL and the PNG reward curve."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agentlightning.algorithm.grpo.metrics import MetricsWriter, format_metrics, plot_reward_curve, read_metrics

pytestmark = pytest.mark.train


def test_metrics_are_appended_as_json_lines_and_survive_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "run" / "metrics.jsonl"
    writer = MetricsWriter(path)
    writer.write(0, {"val_reward_mean": 0.1})
    writer.write(1, {"reward_mean": 0.2, "reward_std": 0.05, "loss": math.nan})
    MetricsWriter(path).write(2, {"reward_mean": 0.4, "reward_std": 0.1, "val_reward_mean": 0.3})
    with path.open("a") as handle:
        handle.write('{"step": 3, "rew')  # a crash mid-write
    records = read_metrics(path)
    assert [r["step"] for r in records] == [0, 1, 2]
    assert records[1]["loss"] is None  # NaN is not JSON
    assert read_metrics(tmp_path / "missing.jsonl") == []


def test_reward_curve_is_a_png(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path / "metrics.jsonl")
    for step in range(1, 4):
        writer.write(step, {"reward_mean": step / 10, "reward_std": 0.01, "val_reward_mean": step / 20})
    output = plot_reward_curve(writer.path, tmp_path / "curve.png")
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_format_metrics_is_one_readable_line() -> None:
    line = format_metrics(3, {"reward_mean": 0.12345, "rollouts": 8, "note": "x"}, ["reward_mean", "rollouts"])
    assert line == "step 3: reward_mean=0.1235 rollouts=8"
