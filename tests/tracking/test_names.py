"""Names a backend would refuse or misread: an MLflow metric named `../x` keeps MLflow logging for the whole
run, and a TensorBoard run name with `../` stays inside the tracking directory (real libraries, read back)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlightning.tracking import MultiTracker, TrackingConfig, make_tracker

from .readback import mlflow_run, tensorboard_run

HOSTILE_METRICS = {"../x": 1.0, "a//b": 2.0, "./c": 3.0, "/abs": 4.0, "...": 5.0, "m" * 300: 6.0, "reward": 0.5}


def test_mlflow_keeps_logging_metrics_and_params_whose_names_are_paths(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    config = {"../lr": 0.1, "a//b": 1, "opt": {"..": "adam"}}
    tracker = make_tracker("mlflow", config=config, run_name="names", dir=str(tmp_path))
    assert isinstance(tracker, MultiTracker)
    for step in (1, 2, 3):
        tracker.log_metrics({**HOSTILE_METRICS, "reward": step / 10}, step)
    assert [t.name for t in tracker.trackers] == ["mlflow"], "MLflow is still logging"
    tracker.finish()
    run = mlflow_run(tmp_path)
    assert run["status"] == "FINISHED"
    assert run["history"]["reward"] == {1: 0.1, 2: 0.2, 3: 0.3}, "no batch was rejected"
    assert set(run["history"]) == {"__/x", "a/b", "_/c", "abs", "___", "m" * 250, "reward"}
    assert run["history"]["__/x"] == {1: 1.0, 2: 1.0, 3: 1.0} and "m" * 250 in run["history"]
    assert run["params"] == {"__/lr": "0.1", "a/b": "1", "opt...": "adam"}  # dots inside a name are no path segment


@pytest.mark.parametrize("run_name", ["../escape", "../../far/away", "nested/name", "..", "a/../../b"])
def test_a_tensorboard_run_name_never_leads_out_of_the_tracking_directory(tmp_path: Path, run_name: str) -> None:
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    tracking = tmp_path / "tracking"
    tracker = make_tracker(TrackingConfig(backends=["tensorboard"], run_name=run_name, dir=str(tracking)))
    tracker.log_metrics({"reward": 0.5}, 1)
    tracker.finish()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all(p.resolve().is_relative_to((tracking / "tensorboard").resolve()) for p in written)
    (run_dir,) = {p.parent for p in written}
    assert run_dir.parent == tracking / "tensorboard"
    assert tensorboard_run(run_dir)["history"]["reward"] == {1: 0.5}
