"""VERL integration: the agent-mode daemon, batch building, padding helpers, config and version checks.

`AgentLightningTrainer` (a verl `RayPPOTrainer`) and the entrypoint need the `verl` extra and a GPU; the
rest runs on CPU with torch and tensordict. Names load lazily, so importing this package is cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .batch import TrajectorySampleBuilder, TransitionSampleBuilder, build_batch
    from .config import load_default_config
    from .daemon import AgentModeDaemon
    from .entrypoint import run_ppo
    from .padding import get_left_padded_ids_and_attention_mask, get_right_padded_ids_and_attention_mask
    from .trainer import AgentLightningTrainer
    from .versions import check_versions

__all__ = [
    "AgentModeDaemon",
    "AgentLightningTrainer",
    "get_left_padded_ids_and_attention_mask",
    "get_right_padded_ids_and_attention_mask",
    "build_batch",
    "TransitionSampleBuilder",
    "TrajectorySampleBuilder",
    "load_default_config",
    "check_versions",
    "run_ppo",
]

_LOCATIONS = {
    "AgentModeDaemon": "daemon",
    "AgentLightningTrainer": "trainer",
    "get_left_padded_ids_and_attention_mask": "padding",
    "get_right_padded_ids_and_attention_mask": "padding",
    "build_batch": "batch",
    "TransitionSampleBuilder": "batch",
    "TrajectorySampleBuilder": "batch",
    "load_default_config": "config",
    "check_versions": "versions",
    "run_ppo": "entrypoint",
}


_GPU_MODULES = ("trainer", "entrypoint")


def __getattr__(name: str) -> Any:
    module = _LOCATIONS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        loaded = importlib.import_module(f"{__name__}.{module}")
    except ImportError as exc:
        if module not in _GPU_MODULES:
            raise
        raise ImportError(
            f"agentlightning.verl.{name} needs verl with its GPU stack ({exc}); "
            "install it with: pip install 'agentlightning[verl]'"
        ) from exc
    return getattr(loaded, name)
