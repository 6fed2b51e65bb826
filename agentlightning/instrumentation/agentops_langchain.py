"""Give AgentOps' LangChain chain spans their run name, so adapters' `agent_match` can select them.

AgentOps' `LangchainCallbackHandler.on_chain_start` reads the chain name from `serialized["name"]`, but
LangChain >= 0.2 passes `serialized=None` for runnables (and LangGraph nodes) and the run name as the
`name` keyword; every chain span then says `langchain.chain.type = "unknown_chain"`. The patch fills
`serialized["name"]` from that keyword.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Optional

try:
    from agentops.integration.callbacks.langchain import LangchainCallbackHandler
except ImportError as exc:  # pragma: no cover - exercised only without the extras
    raise ImportError(
        "agentlightning.instrumentation.agentops_langchain needs AgentOps and LangChain: "
        "pip install agentlightning[agentops,langchain]"
    ) from exc

__all__ = ["instrument_agentops_langchain", "uninstrument_agentops_langchain"]

_lock = threading.Lock()
_original: Optional[Any] = None


def _with_run_name(serialized: Optional[dict[str, Any]], kwargs: dict[str, Any]) -> Optional[dict[str, Any]]:
    name = kwargs.get("name")
    if not isinstance(name, str) or not name or (serialized and serialized.get("name")):
        return serialized
    return {**(serialized or {}), "name": name}


def instrument_agentops_langchain() -> bool:
    """Patch AgentOps' LangChain handler to name chain spans after the run (idempotent)."""
    global _original
    with _lock:
        if _original is not None:
            return True
        original = LangchainCallbackHandler.__dict__["on_chain_start"]

        @functools.wraps(original)
        def on_chain_start(self: Any, serialized: Optional[dict[str, Any]], inputs: Any, **kwargs: Any) -> Any:
            return original(self, _with_run_name(serialized, kwargs), inputs, **kwargs)

        LangchainCallbackHandler.on_chain_start = on_chain_start  # type: ignore[method-assign]
        _original = original
    return True


def uninstrument_agentops_langchain() -> None:
    """Restore AgentOps' original `on_chain_start`."""
    global _original
    with _lock:
        if _original is not None:
            LangchainCallbackHandler.on_chain_start = _original  # type: ignore[method-assign]
            _original = None
