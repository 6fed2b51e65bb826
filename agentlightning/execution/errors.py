"""Errors that end a run with one message saying what went wrong and what to do about it."""

from __future__ import annotations

__all__ = ["RunError", "RolloutsFailedError"]


class RunError(RuntimeError):
    """A run could not start or could not go on: a port in use, a store that does not answer, a runner that died.

    `Trainer.fit` / `dev` raise it from their own frame, so the traceback is a few lines and the message
    says what was waited for or what clashed, and the way out.
    """


class RolloutsFailedError(RunError):
    """Every rollout of a `fit` / `dev` failed; the message counts the failures by error."""
