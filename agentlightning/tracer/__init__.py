"""Tracers: capture agent activity as spans and deliver them to the store.

`AgentOpsTracer` is resolved lazily so that importing this package never imports agentops (an optional
extra); `WeaveTracer` lives at `agentlightning.tracer.weave`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Tracer, clear_active_tracer, get_active_tracer, set_active_tracer
from .dummy import DummyTracer
from .otel import OtelTracer

if TYPE_CHECKING:
    from .agentops import AgentOpsTracer

__all__ = [
    "AgentOpsTracer",
    "Tracer",
    "OtelTracer",
    "DummyTracer",
    "get_active_tracer",
    "set_active_tracer",
    "clear_active_tracer",
]


def __getattr__(name: str) -> Any:
    if name == "AgentOpsTracer":
        from .agentops import AgentOpsTracer

        return AgentOpsTracer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
