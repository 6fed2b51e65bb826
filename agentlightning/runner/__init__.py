"""Runners: execute a `LitAgent` rollout by rollout under a tracer, reporting to a `LightningStore`."""

from typing import TYPE_CHECKING, Any

from .agent import LitAgentRunner
from .base import Hook, Runner

if TYPE_CHECKING:
    from agentlightning.compat.runner_legacy import LegacyAgentRunner

__all__ = ["Runner", "LitAgentRunner", "LegacyAgentRunner", "Hook"]


def __getattr__(name: str) -> Any:
    # v0.3's `agentlightning.runner.LegacyAgentRunner` (v0.1 loop) lives in `agentlightning.compat`.
    if name == "LegacyAgentRunner":
        import importlib

        return importlib.import_module("agentlightning.compat.runner_legacy").LegacyAgentRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
