"""Training metrics: one JSON line per step, and a PNG reward curve drawn from those lines."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

__all__ = ["MetricsWriter", "read_metrics", "plot_reward_curve", "format_metrics"]

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf
    return value


class MetricsWriter:
    """Appends `{"step": ..., "time": ..., **metrics}` lines to a JSONL file (survives restarts)."""

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, step: int, metrics: Mapping[str, Any]) -> Dict[str, Any]:
        record = {"step": step, "time": time.time(), **{k: _clean(v) for k, v in metrics.items()}}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        return record


def read_metrics(path: PathLike) -> List[Dict[str, Any]]:
    """All records of a metrics file; a torn last line (crash mid-write) is ignored."""
    records: List[Dict[str, Any]] = []
    file = Path(path)
    if not file.exists():
        return records
    for line in file.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            logger.warning("Ignoring a malformed line in %s", file)
    return records


def format_metrics(step: int, metrics: Mapping[str, Any], keys: Optional[List[str]] = None) -> str:
    """A compact one-line summary for logs."""
    chosen = keys or [k for k in metrics if isinstance(metrics[k], (int, float))]
    parts = [
        f"{k}={metrics[k]:.4g}" if isinstance(metrics[k], float) else f"{k}={metrics[k]}"
        for k in chosen
        if k in metrics
    ]
    return f"step {step}: " + " ".join(parts)


def plot_reward_curve(metrics_path: PathLike, png_path: PathLike, *, title: str = "GRPO reward") -> Path:
    """Plot train reward (mean with a +-std band) and validation reward per step into a PNG (matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    records = read_metrics(metrics_path)
    train = [r for r in records if isinstance(r.get("reward_mean"), (int, float))]
    val = [r for r in records if isinstance(r.get("val_reward_mean"), (int, float))]
    figure, axes = plt.subplots(figsize=(7, 4))
    if train:
        steps = [r["step"] for r in train]
        mean = [r["reward_mean"] for r in train]
        std = [r.get("reward_std") or 0.0 for r in train]
        axes.plot(steps, mean, marker="o", label="train reward (mean)")
        axes.fill_between(
            steps,
            [m - s for m, s in zip(mean, std, strict=False)],
            [m + s for m, s in zip(mean, std, strict=False)],
            alpha=0.2,
        )
    if val:
        axes.plot([r["step"] for r in val], [r["val_reward_mean"] for r in val], marker="s", label="validation reward")
    axes.set_xlabel("step")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    axes.set_ylabel("reward")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    if train or val:
        axes.legend()
    output = Path(png_path)
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(output, dpi=100)
    plt.close(figure)
    return output
