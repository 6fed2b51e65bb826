"""The tracking API every algorithm logs through: a config once, then scalar metrics per step.

Backends (W&B, MLflow, TensorBoard) live in their own modules and import their library only when a run
uses them; `make_tracker` picks them by name. A backend that fails while logging is reported once and
skipped, so a tracking outage never stops training; a backend that cannot start fails at once.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["Tracker", "NullTracker", "MultiTracker", "TrackingConfig", "scalar_metrics", "flatten_config"]

logger = logging.getLogger(__name__)


class Tracker:
    """Receives a run's configuration once and its metrics at each step; `finish` ends the run."""

    name: str = "tracker"

    def log_config(self, config: Mapping[str, Any]) -> None:
        """Record hyperparameters (nested dicts allowed)."""

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Record the numeric values of `metrics` at `step`; other values are ignored."""

    def finish(self) -> None:
        """Flush and close the run; further calls are ignored."""

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


class NullTracker(Tracker):
    """Tracks nothing: what an algorithm gets when no backend was chosen."""

    name = "none"


class MultiTracker(Tracker):
    """Fans every call out to several trackers; one that raises is logged and dropped, the others go on."""

    name = "multi"

    def __init__(self, trackers: Sequence[Tracker]) -> None:
        self.trackers = list(trackers)

    def _each(self, action: str, *args: Any) -> None:
        for tracker in list(self.trackers):
            try:
                getattr(tracker, action)(*args)
            except Exception:
                logger.exception("tracking backend %r failed in %s; it is skipped from now on", tracker.name, action)
                self.trackers.remove(tracker)

    def log_config(self, config: Mapping[str, Any]) -> None:
        self._each("log_config", config)

    def log_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        self._each("log_metrics", metrics, step)

    def finish(self) -> None:
        self._each("finish")


@dataclass
class TrackingConfig:
    """Which backends a run logs to and where.

    `dir` holds every local output (W&B's `wandb/`, MLflow's file store `mlruns/`, TensorBoard's event
    files under `tensorboard/<run_name>/`); None keeps each library's own default (`./wandb`, the
    `MLFLOW_TRACKING_URI` or `./mlruns`, `./runs/<run_name>`).
    """

    backends: list[str] = field(default_factory=lambda: [])
    """Any of "wandb", "mlflow", "tensorboard"."""
    project: str = "agentlightning"
    """W&B project, MLflow experiment."""
    run_name: Optional[str] = None
    """Name of the run in every backend (None: the backend picks one; TensorBoard: a timestamp)."""
    dir: Optional[str] = None


def scalar_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite int/float/bool values of `metrics` as floats (strings, lists, NaN and inf are left out)."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
            try:
                value = value.item()
            except (TypeError, ValueError):
                continue
        if isinstance(value, (bool, int, float)) and math.isfinite(float(value)):
            out[str(key)] = float(value)
    return out


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys (`{"a": {"b": 1}}` -> `{"a.b": 1}`); other values unchanged."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, name + "."))  # type: ignore[arg-type]
        else:
            flat[name] = value
    return flat


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_\-. /]")


def safe_name(name: str) -> str:
    """A metric or parameter name every backend accepts (MLflow's rules are the strictest)."""
    return _UNSAFE_NAME.sub("_", name)
