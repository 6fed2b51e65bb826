"""Algorithms: the base class, the `@algo` decorator, the Baseline, schedules, and lazy factories for the
algorithms with optional dependencies (APO, GEPA, GRPO, RFT, VERL)."""

from __future__ import annotations

import importlib
from typing import Any

from .base import Algorithm, TrainedPolicy
from .baseline import Baseline
from .decorator import algo
from .fast import FastAlgorithm
from .schedule import Schedule

__all__ = [
    "Algorithm",
    "algo",
    "FastAlgorithm",
    "Baseline",
    "Schedule",
    "TrainedPolicy",
    "APO",
    "GEPA",
    "VERL",
    "GRPO",
    "RFT",
]


def _load_optional(module: str, extra: str, purpose: str) -> Any:
    try:
        return importlib.import_module(f"{__name__}.{module}")
    except ImportError as exc:
        raise ImportError(
            f"{purpose} is not available ({exc}); install it with: pip install 'agentlightning[{extra}]'"
        ) from exc


def APO(*args: Any, **kwargs: Any) -> Any:
    """Build `agentlightning.algorithm.apo.APO` (prompt optimization; needs the `apo` extra)."""
    return _load_optional("apo", "apo", "APO").APO(*args, **kwargs)


def GEPA(*args: Any, **kwargs: Any) -> Any:
    """Build `agentlightning.algorithm.gepa.GEPA` (reflective Pareto prompt search; needs the `gepa` extra)."""
    return _load_optional("gepa", "gepa", "GEPA").GEPA(*args, **kwargs)


def VERL(*args: Any, **kwargs: Any) -> Any:
    """Build `agentlightning.algorithm.verl.VERL` (RL with VERL/vLLM on GPUs; needs the `verl` extra)."""
    return _load_optional("verl", "verl", "VERL").VERL(*args, **kwargs)


def GRPO(*args: Any, **kwargs: Any) -> Any:
    """Build `agentlightning.algorithm.grpo.GRPO` (torch-native RL on CPU or one GPU; needs the `train` extra)."""
    return _load_optional("grpo", "train", "GRPO").GRPO(*args, **kwargs)


def RFT(*args: Any, **kwargs: Any) -> Any:
    """Build `agentlightning.algorithm.rft.RFT` (rejection-sampling fine-tuning; needs the `train` extra)."""
    return _load_optional("rft", "train", "RFT").RFT(*args, **kwargs)
