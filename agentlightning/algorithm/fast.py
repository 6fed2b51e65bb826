"""FastAlgorithm: the marker for quick algorithms that `Trainer.dev()` accepts."""

from __future__ import annotations

from .base import Algorithm

__all__ = ["FastAlgorithm"]


class FastAlgorithm(Algorithm):
    """An algorithm cheap enough for dry runs: no GPUs, no model training, finishes quickly.

    `Trainer.dev()` only runs subclasses of this class, so a debugging session never starts a
    full RL job by accident.
    """
