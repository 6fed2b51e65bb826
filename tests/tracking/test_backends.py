"""Each tracking backend against its real library: what a run logs is read back from the files it wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlightning.tracking import MultiTracker, NullTracker, Tracker, TrackingConfig, make_tracker, parse_backends

from .readback import mlflow_run, tensorboard_run, wandb_run

CONFIG = {"learning_rate": 1e-5, "group_size": 4, "lora": {"rank": 8, "targets": ["q_proj", "v_proj"]}}
CURVE = {1: 0.25, 2: 0.5, 3: 0.75}


def _log_curve(tracker: Tracker) -> None:
    for step, reward in CURVE.items():
        # Strings, NaN and lists are not scalars: left out, never an error.
        tracker.log_metrics({"reward_mean": reward, "loss": 1.0 - reward, "note": "x", "nan": float("nan")}, step)
    tracker.finish()
    tracker.finish()  # idempotent


def test_wandb_offline_run_holds_config_steps_and_reward_curve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    _log_curve(make_tracker(["wandb"], config=CONFIG, run_name="grpo-test", dir=str(tmp_path)))
    run = wandb_run(tmp_path)
    assert (run["name"], run["project"]) == ("grpo-test", "agentlightning")
    assert run["config"]["learning_rate"] == 1e-5 and run["config"]["lora"] == {
        "rank": 8,
        "targets": ["q_proj", "v_proj"],
    }
    assert set(run["history"]) == {"reward_mean", "loss"}
    assert run["history"]["reward_mean"] == CURVE


def test_mlflow_file_store_run_holds_params_steps_and_reward_curve(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    _log_curve(make_tracker("mlflow", config=CONFIG, project="agl-test", run_name="apo-test", dir=str(tmp_path)))
    run = mlflow_run(tmp_path, experiment="agl-test")
    assert (run["name"], run["status"]) == ("apo-test", "FINISHED")
    assert run["params"]["learning_rate"] == "1e-05"
    assert run["params"]["lora.rank"] == "8" and run["params"]["lora.targets"] == '["q_proj", "v_proj"]'
    assert set(run["history"]) == {"reward_mean", "loss"}
    assert run["history"]["reward_mean"] == CURVE


def test_tensorboard_event_files_hold_config_and_reward_curve(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    settings = TrackingConfig(backends=["tensorboard"], run_name="verl-test", dir=str(tmp_path))
    _log_curve(make_tracker(settings, config=CONFIG))
    run = tensorboard_run(tmp_path / "tensorboard" / "verl-test")
    assert set(run["history"]) == {"reward_mean", "loss"}
    assert run["history"]["reward_mean"] == CURVE
    assert '"rank": 8' in run["config"] and '"group_size": 4' in run["config"]


def test_several_backends_at_once_each_get_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed")
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    monkeypatch.setenv("AGL_TRACKING", "mlflow, tensorboard")
    tracker = make_tracker(None, config=CONFIG, run_name="both", dir=str(tmp_path))
    assert isinstance(tracker, MultiTracker) and [t.name for t in tracker.trackers] == ["mlflow", "tensorboard"]
    _log_curve(tracker)
    assert mlflow_run(tmp_path)["history"]["reward_mean"] == CURVE
    assert tensorboard_run(tmp_path / "tensorboard" / "both")["history"]["reward_mean"] == CURVE


def test_a_failing_backend_is_dropped_and_the_others_go_on() -> None:
    class Broken(Tracker):
        name = "broken"

        def log_metrics(self, metrics: object, step: int) -> None:  # type: ignore[override]
            raise RuntimeError("network down")

    class Recording(Tracker):
        name = "recording"

        def __init__(self) -> None:
            self.steps: list[int] = []

        def log_metrics(self, metrics: object, step: int) -> None:  # type: ignore[override]
            self.steps.append(step)

    recording = Recording()
    tracker = MultiTracker([Broken(), recording])
    tracker.log_metrics({"a": 1.0}, 1)
    tracker.log_metrics({"a": 1.0}, 2)
    assert [t.name for t in tracker.trackers] == ["recording"] and recording.steps == [1, 2]


def test_backend_names_are_checked() -> None:
    assert parse_backends("wandb, MLflow,,none") == ["wandb", "mlflow"]
    assert parse_backends(["tensorboard", "tensorboard"]) == ["tensorboard"]
    with pytest.raises(ValueError, match="unknown tracking backend 'neptune'; choose from"):
        parse_backends(["neptune"])
    assert isinstance(make_tracker(None), NullTracker)
    assert isinstance(make_tracker([]), NullTracker)
