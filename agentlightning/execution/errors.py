"""Errors that end a run with one message saying what went wrong and what to do about it."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Optional

__all__ = ["RunError", "RolloutsFailedError", "report_run_errors_in_one_line"]


class RunError(RuntimeError):
    """A run could not start or could not go on: a port in use, a store that does not answer, a runner that died.

    The message says what was waited for or what clashed, and the way out. When one reaches the top of a
    script uncaught, it is printed as that one line, without a traceback (`report_run_errors_in_one_line`).
    """


class RolloutsFailedError(RunError):
    """Every rollout of a `fit` / `dev` failed; the message counts the failures by error."""


def report_run_errors_in_one_line() -> None:
    """Make an uncaught `RunError` print `RunError: <message>` only; any other exception keeps its traceback.

    A `RunError` already says what went wrong and what to do: the frames of the user's script, `fit` and the
    strategy above it add nothing. Installed once (by `Trainer.fit` / `dev`), in front of the current hook.
    """
    previous = sys.excepthook
    if getattr(previous, "_agl_run_errors", False):
        return

    def hook(kind: type[BaseException], error: BaseException, traceback: Optional[TracebackType]) -> None:
        if isinstance(error, RunError):
            print(f"{kind.__name__}: {error}", file=sys.stderr, flush=True)
            return
        previous(kind, error, traceback)

    hook._agl_run_errors = True  # type: ignore[attr-defined]
    sys.excepthook = hook
