"""agentlightning: train any AI agent with reinforcement learning and automatic prompt optimization.

Names are resolved lazily so `import agentlightning` stays fast and never imports optional extras.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List

__version__ = "0.3.0"

# Subpackages whose `__all__` is re-exported at the top level (SPEC section 1).
_STAR_MODULES: List[str] = [
    "adapter",
    "algorithm",
    "config",
    "emitter",
    "env_var",
    "execution",
    "litagent",
    "llm_proxy",
    "runner",
    "store",
    "tracer",
    "trainer",
    "types",
]

_EXPLICIT: Dict[str, str] = {
    "AgentLightningClient": "client",
    "DevTaskLoader": "client",
    "AgentLightningServer": "server",
    "configure_logger": "logging",
    "setup_logging": "logging:setup",
    "setup_module_logging": "logging:setup_module",
}

_index: Dict[str, str] | None = None


def _build_index() -> Dict[str, str]:
    index: Dict[str, str] = {}
    for module_name in _STAR_MODULES:
        try:
            module = importlib.import_module(f"{__name__}.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(f"{__name__}.{module_name}"):
                continue
            raise
        for name in getattr(module, "__all__", ()):
            index.setdefault(name, module_name)
    return index


def __getattr__(name: str) -> Any:
    global _index
    if name in _EXPLICIT:
        target = _EXPLICIT[name]
        module_name, _, attr = target.partition(":")
        module = importlib.import_module(f"{__name__}.{module_name}")
        return getattr(module, attr or name)
    if _index is None:
        _index = _build_index()
    if name in _index:
        module = importlib.import_module(f"{__name__}.{_index[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'agentlightning' has no attribute {name!r}")


def __dir__() -> List[str]:
    global _index
    if _index is None:
        _index = _build_index()
    return sorted(set(globals()) | set(_index) | set(_EXPLICIT))
