"""OpenAI-compatible serving of a trainable Hugging Face causal LM (the policy server).

Names are resolved lazily: importing this package does not import torch, transformers or fastapi.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlightning._lazy import lazy_exports

if TYPE_CHECKING:
    from .echo import EchoServer
    from .engine import PolicyEngine
    from .models import load_causal_lm, load_smollm2
    from .sampling import SamplingParams
    from .server import PolicyServer

__all__ = ["EchoServer", "PolicyServer", "PolicyEngine", "SamplingParams", "load_causal_lm", "load_smollm2"]

_LAZY: dict[str, str] = {
    "EchoServer": ".echo",
    "PolicyServer": ".server",
    "PolicyEngine": ".engine",
    "SamplingParams": ".sampling",
    "load_causal_lm": ".models",
    "load_smollm2": ".models",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
