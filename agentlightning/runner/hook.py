"""`Hook`: callbacks a runner invokes around each rollout (defined in `runner/base.py`, beside `Runner`)."""

from .base import Hook

__all__ = ["Hook"]
