"""Algorithms: the base class, the `@algo` decorator, the Baseline, and lazy factories for APO and VERL."""

from __future__ import annotations

import importlib
from typing import Any

from .base import Algorithm
from .baseline import Baseline
from .decorator import algo
from .fast import FastAlgorithm

__all__ = ["Algorithm", "algo", "FastAlgorithm", "Baseline", "APO", "VERL", "GRPO"]


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


def VERL(*args: Any, **kwargs: Any) -> Any:
    """Build `agentlightning.algorithm.verl.VERL` (RL with VERL/vLLM on GPUs; needs the `verl` extra)."""
    return _load_optional("verl", "verl", "VERL").VERL(*args, **kwargs)


def GRPO(*args: Any, **kwargs: Any) -> Any:
    """Build `agentlightning.algorithm.grpo.GRPO` (torch-native RL on CPU or one GPU; needs the `train` extra)."""
    return _load_optional("grpo", "train", "GRPO").GRPO(*args, **kwargs)
