"""Tracking backends: Weights & Biases, MLflow and TensorBoard, each importing its library on first use."""

from __future__ import annotations

import json
import logging
import netrc
import os
import posixpath
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from .base import Tracker, TrackingConfig, flatten_config, safe_name, scalar_metrics

__all__ = ["WandbTracker", "MlflowTracker", "TensorBoardTracker", "mlflow_key", "tensorboard_run_dir"]

logger = logging.getLogger(__name__)

_PARAM_VALUE_LIMIT = 6000  # MLflow rejects longer parameter values
_MLFLOW_KEY_LIMIT = 250  # MLflow rejects longer metric and parameter names


def mlflow_key(name: str) -> str:
    """A metric or parameter name MLflow accepts for `name`.

    MLflow refuses names that would resolve to another path (`../x`, `a//b`, `./a`, `/a`) and longer than
    250 characters; one refused name fails the whole batch it is in. Such segments become underscores.
    """
    segments = [segment for segment in safe_name(name).split("/") if segment]
    segments = ["_" * len(segment) if set(segment) == {"."} else segment for segment in segments]
    key = "/".join(segments)[:_MLFLOW_KEY_LIMIT].rstrip("/") or "_"
    if posixpath.normpath(key) != key or key.startswith(".."):
        key = "_" + key.replace("/", "_")[: _MLFLOW_KEY_LIMIT - 1]
    return key


def tensorboard_run_dir(root: Path, run_name: str) -> Path:
    """The directory of run `run_name` under `root`: the name is one path component, never a way out of `root`."""
    component = re.sub(r"[/\\\x00]", "_", run_name).strip()
    if component in ("", ".", ".."):
        component = component.replace(".", "_") or "_"
    directory = root / component
    if not directory.resolve().is_relative_to(root.resolve()):  # e.g. a symlink planted under root
        raise ValueError(f"TensorBoard run name {run_name!r} leads outside {root}; pick another run_name")
    return directory


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

        params: dict[str, Any] = {}
        for key, value in flatten_config(config).items():  # two names may become one key: the first is kept
            text = (value if isinstance(value, str) else json.dumps(value, default=str))[:_PARAM_VALUE_LIMIT]
            params.setdefault(mlflow_key(key), Param(mlflow_key(key), text))
        batch = list(params.values())
        for start in range(0, len(batch), 100):  # MLflow takes at most 100 params per batch
            self._log_batch("params", batch[start : start + 100])

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        named: dict[str, Any] = {}
        for key, value in scalar_metrics(metrics).items():
            named.setdefault(mlflow_key(key), Metric(mlflow_key(key), value, now, step))
        batch = list(named.values())
        for start in range(0, len(batch), 1000):
            self._log_batch("metrics", batch[start : start + 1000])

    def _log_batch(self, kind: str, batch: list[Any]) -> None:
        """Log `batch`; should MLflow refuse it for one entry, log the others one by one and skip that one."""
        from mlflow.exceptions import MlflowException

        try:
            self.client.log_batch(self.run_id, **{kind: batch})
        except MlflowException as exc:
            if exc.error_code != "INVALID_PARAMETER_VALUE":  # not about what was logged (the store is down): raise
                raise
            if len(batch) == 1:
                logger.warning("MLflow refused %s %r; it is skipped: %s", kind[:-1], batch[0].key, exc.message)
                return
            for entry in batch:
                self._log_batch(kind, [entry])

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
        self.log_dir = tensorboard_run_dir(root, run_name)
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
