"""APO: automatic prompt optimization (beam search over prompt templates with textual gradients)."""

from .apo import APO
from .llm import RetryPolicy
from .report import APOReport

__all__ = ["APO", "APOReport", "RetryPolicy"]
