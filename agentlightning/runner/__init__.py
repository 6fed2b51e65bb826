"""Runners: execute a `LitAgent` rollout by rollout under a tracer, reporting to a `LightningStore`."""

from .agent import LitAgentRunner
from .base import Runner
from .hook import Hook
from .legacy import LegacyAgentRunner

__all__ = ["Runner", "LitAgentRunner", "LegacyAgentRunner", "Hook"]
