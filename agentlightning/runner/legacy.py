"""Old path of the v0.1 `LegacyAgentRunner`; it lives in `agentlightning.compat.runner_legacy`."""

from agentlightning.compat.runner_legacy import LegacyAgentRunner

__all__ = ["LegacyAgentRunner"]
