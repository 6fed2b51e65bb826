"""Runners: execute a `LitAgent` rollout by rollout under a tracer, reporting to a `LightningStore`."""

from .agent import LitAgentRunner
from .base import Runner

__all__ = ["Runner", "LitAgentRunner"]
