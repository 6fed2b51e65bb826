"""OpenAI-compatible serving of a trainable Hugging Face causal LM (the policy server).

Names are resolved lazily: importing this package does not import torch, transformers or fastapi.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Dict, List

if TYPE_CHECKING:
    from .echo import EchoServer
    from .engine import PolicyEngine
    from .models import load_causal_lm, load_smollm2
    from .sampling import SamplingParams
    from .server import PolicyServer

__all__ = ["EchoServer", "PolicyServer", "PolicyEngine", "SamplingParams", "load_causal_lm", "load_smollm2"]

_LAZY: Dict[str, str] = {
    "EchoServer": "echo",
    "PolicyServer": "server",
    "PolicyEngine": "engine",
    "SamplingParams": "sampling",
    "load_causal_lm": "models",
    "load_smollm2": "models",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
