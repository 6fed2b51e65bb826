"""Agents: the `LitAgent` base class and the `@rollout` family of function decorators."""

from .decorator import FunctionalLitAgent as FunctionalLitAgent  # importable here, not star-exported
from .decorator import llm_rollout, prompt_rollout, rollout
from .litagent import LitAgent
from .process import ProcessAgent, ProcessAgentError

__all__ = ["LitAgent", "ProcessAgent", "ProcessAgentError", "llm_rollout", "prompt_rollout", "rollout"]
