"""Agents: the `LitAgent` base class and the `@rollout` family of function decorators."""

from .decorator import FunctionalLitAgent as FunctionalLitAgent  # importable here, not star-exported
from .decorator import llm_rollout, prompt_rollout, rollout
from .litagent import LitAgent

__all__ = ["LitAgent", "llm_rollout", "prompt_rollout", "rollout"]
