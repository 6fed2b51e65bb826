"""Experiment tracking: algorithms log their config and per-step metrics to W&B, MLflow or TensorBoard.

Choose backends by name wherever a run is configured: `Trainer(tracking=["wandb", "mlflow"])`,
`GRPOConfig(tracking=[...])`, `APO(..., tracking=[...])`, `agentlightning.tracking` in a VERL config, or
the `AGL_TRACKING=wandb,tensorboard` environment variable. Each backend is an optional extra imported
only when a run uses it. A custom `@algo` receives the tracker as its `tracker` parameter; any algorithm
reaches it with `self.get_tracker()`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Optional, Union

from .base import MultiTracker, NullTracker, Tracker, TrackingConfig, flatten_config, scalar_metrics

__all__ = [
    "Tracker",
    "NullTracker",
    "MultiTracker",
    "TrackingConfig",
    "TrackingSpec",
    "TRACKING_BACKENDS",
    "TRACKING_ENV_VAR",
    "make_tracker",
    "parse_backends",
    "scalar_metrics",
    "flatten_config",
]

TRACKING_BACKENDS = ("wandb", "mlflow", "tensorboard")
TRACKING_ENV_VAR = "AGL_TRACKING"

TrackingSpec = Union[None, str, Sequence[str], TrackingConfig, Tracker]
"""Backend names (a list or a comma-separated string), a `TrackingConfig`, or a ready `Tracker`."""


def parse_backends(names: Union[str, Sequence[str]]) -> list[str]:
    """Backend names from a list or "a,b"; ValueError names an unknown one and the choices."""
    items = [names] if isinstance(names, str) else list(names)
    for item in items:
        if not isinstance(item, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"tracking backends must be strings, got {item!r}")
    backends: list[str] = []
    for item in (part for text in items for part in text.split(",")):
        name = item.strip().lower()
        if not name or name in ("none", "off"):
            continue
        if name not in TRACKING_BACKENDS:
            raise ValueError(f"unknown tracking backend {item!r}; choose from {list(TRACKING_BACKENDS)}")
        if name not in backends:
            backends.append(name)
    return backends


def make_tracker(
    spec: TrackingSpec = None,
    *,
    config: Optional[Mapping[str, Any]] = None,
    project: Optional[str] = None,
    run_name: Optional[str] = None,
    dir: Optional[str] = None,
) -> Tracker:
    """Start the chosen backends (None: `AGL_TRACKING`, else nothing) and log `config` to them.

    `project`, `run_name` and `dir` fill what a `TrackingConfig` leaves unset.
    """
    from .backends import BACKENDS

    if isinstance(spec, Tracker):
        if config:
            spec.log_config(config)
        return spec
    if spec is None:
        spec = os.environ.get(TRACKING_ENV_VAR) or None
    if spec is None:
        return NullTracker()
    if isinstance(spec, TrackingConfig):
        settings = replace(spec, run_name=spec.run_name or run_name, dir=spec.dir or dir)
    else:
        settings = TrackingConfig(
            backends=list(spec) if not isinstance(spec, str) else [spec], run_name=run_name, dir=dir
        )
        if project:
            settings.project = project
    settings.backends = parse_backends(settings.backends)
    if not settings.backends:
        return NullTracker()
    started: list[Tracker] = []
    try:
        for name in settings.backends:
            started.append(BACKENDS[name](settings))
    except BaseException:
        for tracker in started:
            tracker.finish()
        raise
    tracker = MultiTracker(started)
    if config:
        tracker.log_config(config)
    return tracker
