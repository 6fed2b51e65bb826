"""Tracking backends: Weights & Biases, MLflow and TensorBoard, each importing its library on first use."""

from __future__ import annotations

import json
import logging
import netrc
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from .base import Tracker, TrackingConfig, flatten_config, safe_name, scalar_metrics

__all__ = ["WandbTracker", "MlflowTracker", "TensorBoardTracker"]

logger = logging.getLogger(__name__)

_PARAM_VALUE_LIMIT = 6000  # MLflow rejects longer parameter values


def _require(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"tracking={extra!r} needs the {module.split('.')[0]} package ({exc}); "
            f"install it with: pip install 'agentlightning[{extra}]'"
        ) from exc


def _has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


class WandbTracker(Tracker):
    """A W&B run. Without `WANDB_MODE` and without credentials it runs offline (`wandb sync` uploads later)."""

    name = "wandb"

    def __init__(self, settings: TrackingConfig) -> None:
        wandb = _require("wandb", "wandb")
        mode = os.environ.get("WANDB_MODE") or ("online" if _has_wandb_credentials() else "offline")
        if mode == "offline" and not os.environ.get("WANDB_MODE"):
            logger.info("W&B: no credentials found, logging offline; upload later with `wandb sync`")
        directory = None
        if settings.dir is not None:
            Path(settings.dir).mkdir(parents=True, exist_ok=True)
            directory = settings.dir
        self.run: Any = wandb.init(
            project=settings.project,
            name=settings.run_name,
            dir=directory,
            mode=mode,
            reinit="create_new",
        )
        self._finished = False

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.run.config.update(dict(config), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        values = scalar_metrics(metrics)
        if values:
            self.run.log(values, step=step)

    def finish(self) -> None:
        if not self._finished:
            self._finished = True
            self.run.finish()
            import wandb

            if wandb.run is None:  # no other run of this process needs W&B's service process: stop it too
                wandb.teardown()


class MlflowTracker(Tracker):
    """An MLflow run in experiment `project`: a local file store under `dir/mlruns`, else the configured URI."""

    name = "mlflow"

    def __init__(self, settings: TrackingConfig) -> None:
        _require("mlflow", "mlflow")
        from mlflow.tracking import MlflowClient

        if settings.dir is not None:
            uri = (Path(settings.dir).resolve() / "mlruns").as_uri()
        else:
            uri = os.environ.get("MLFLOW_TRACKING_URI") or Path("mlruns").resolve().as_uri()
        if uri.startswith("file:"):
            # MLflow 3.7+ refuses the file store unless asked for; a local file store is what this backend is for.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.tracking_uri = uri
        self.client: Any = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(settings.project)
        experiment_id = (
            experiment.experiment_id if experiment is not None else self.client.create_experiment(settings.project)
        )
        self.run_id: str = self.client.create_run(experiment_id, run_name=settings.run_name).info.run_id
        self._finished = False

    def log_config(self, config: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        params = [
            Param(
                safe_name(key),
                (value if isinstance(value, str) else json.dumps(value, default=str))[:_PARAM_VALUE_LIMIT],
            )
            for key, value in flatten_config(config).items()
        ]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=params[start : start + 100])

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(safe_name(k), v, now, step) for k, v in scalar_metrics(metrics).items()]
        for start in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[start : start + 1000])

    def finish(self) -> None:
        if not self._finished:
            self._finished = True
            self.client.set_terminated(self.run_id)


class TensorBoardTracker(Tracker):
    """TensorBoard event files: one scalar per metric, and the config as a JSON text summary."""

    name = "tensorboard"

    def __init__(self, settings: TrackingConfig) -> None:
        _require("tensorboard", "tensorboard")
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        run_name = settings.run_name or time.strftime("%Y%m%d-%H%M%S")
        root = Path(settings.dir) / "tensorboard" if settings.dir is not None else Path("runs")
        self.log_dir = root / run_name
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer: Any = EventFileWriter(str(self.log_dir))
        self._finished = False

    def _write(self, summary: Any, step: int) -> None:
        from tensorboard.compat.proto import event_pb2

        self._writer.add_event(
            event_pb2.Event(  # pyright: ignore[reportAttributeAccessIssue]
                wall_time=time.time(), step=step, summary=summary
            )
        )

    def log_config(self, config: Mapping[str, Any]) -> None:
        from tensorboard.plugins.text.summary_v2 import text_pb

        text = "```\n" + json.dumps(dict(config), indent=2, default=str, sort_keys=True) + "\n```"
        self._write(text_pb("config", text), 0)

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        from tensorboard.compat.proto import summary_pb2

        values = [
            summary_pb2.Summary.Value(  # pyright: ignore[reportAttributeAccessIssue]
                tag=k, simple_value=v
            )
            for k, v in scalar_metrics(metrics).items()
        ]
        if values:
            self._write(summary_pb2.Summary(value=values), step)  # pyright: ignore[reportAttributeAccessIssue]
            self._writer.flush()

    def finish(self) -> None:
        if not self._finished:
            self._finished = True
            self._writer.close()


BACKENDS: dict[str, Callable[[TrackingConfig], Tracker]] = {
    "wandb": WandbTracker,
    "mlflow": MlflowTracker,
    "tensorboard": TensorBoardTracker,
}
