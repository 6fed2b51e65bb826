"""Runners: execute a `LitAgent` rollout by rollout under a tracer, reporting to a `LightningStore`."""

from typing import TYPE_CHECKING, Any

from agentlightning.types import Hook

from .agent import LitAgentRunner
from .base import Runner

if TYPE_CHECKING:
    from .legacy import LegacyAgentRunner

__all__ = ["Runner", "LitAgentRunner", "LegacyAgentRunner", "Hook"]


def __getattr__(name: str) -> Any:
    # v0.3's `agentlightning.runner.LegacyAgentRunner` (the v0.1 loop) loads on first use.
    if name == "LegacyAgentRunner":
        from .legacy import LegacyAgentRunner

        return LegacyAgentRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
