"""Training metrics: one JSON line per step, a PNG reward curve drawn from those lines, and what a learner
update reports while it runs (`UpdateProgress`) and when it ends (`UpdateTally`)."""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Union

if TYPE_CHECKING:
    from .batch import Sample

__all__ = ["MetricsWriter", "read_metrics", "plot_reward_curve", "format_metrics", "UpdateProgress", "UpdateTally"]

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


@dataclass
class UpdateProgress:
    """What a learner is doing, for progress lines: a phase ("scoring", "learner update"), micro-batches done
    of its total, and the tokens it went through (read from other threads: plain attributes only)."""

    phase: str = ""
    done: int = 0
    total: int = 0
    tokens: int = 0
    started: float = 0.0

    def begin(self, phase: str, total: int) -> None:
        self.done, self.total, self.tokens, self.started = 0, total, 0, time.perf_counter()
        self.phase = phase

    def advance(self, tokens: int = 0) -> None:
        """One more micro-batch done (and its `tokens`)."""
        self.tokens += tokens
        self.done += 1

    def count(self, tokens: int) -> None:
        """Tokens of a micro-batch still under way (a chunk of its rows)."""
        self.tokens += tokens

    def finish(self) -> None:
        self.phase = ""

    def describe(self) -> str:
        """`learner update: 3/4 micro-batches, 412 tokens/s`, or "" when idle."""
        if not self.phase:
            return ""
        elapsed = time.perf_counter() - self.started
        rate = f", {self.tokens / elapsed:.0f} tokens/s" if self.done and elapsed > 0 else ""
        return f"{self.phase}: {self.done}/{self.total} micro-batches{rate}"


@dataclass
class UpdateTally:
    """Sums over an update's micro-batches, turned into the update's metrics at the end."""

    sums: Dict[str, float] = field(default_factory=lambda: defaultdict(float))
    grad_norms: List[float] = field(default_factory=lambda: [])
    losses: List[float] = field(default_factory=lambda: [])
    tokens_seen: int = 0
    tokens_trained: int = 0
    """Trained tokens of the rows some optimizer step used (`max_updates_per_batch` may leave rows out)."""
    tokens_update_cap: int = 0
    """Trained tokens of the rows no optimizer step used."""

    def metrics(self, rows: Sequence[Sample], elapsed: float) -> Dict[str, float]:
        tokens = max(self.sums["tokens"], 1.0)
        advantages = [s.advantage for s in rows]
        return {
            "loss": sum(self.losses) / len(self.losses),
            "pg_loss": self.sums["pg_loss"] / tokens,
            "kl": self.sums["kl"] / tokens,
            "entropy": self.sums["entropy"] / tokens,
            "clip_fraction": self.sums["clip_fraction"] / tokens,
            "ratio_mean": self.sums["ratio"] / tokens,
            "grad_norm": sum(self.grad_norms) / len(self.grad_norms),
            "optimizer_steps": float(len(self.losses)),
            "samples": float(len(rows)),
            "response_tokens": float(sum(s.trained_tokens for s in rows)),
            "row_tokens": float(sum(len(s.prompt_ids) + len(s.response_ids) for s in rows)),
            "advantage_abs_mean": sum(abs(a) for a in advantages) / len(advantages),
            "train_tokens_per_s": self.tokens_seen / elapsed if elapsed > 0 else 0.0,
            "train_time_s": elapsed,
            "tokens_trained": float(self.tokens_trained),
            "tokens_update_cap": float(self.tokens_update_cap),
        }
