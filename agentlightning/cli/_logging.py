"""One log format for every `agl` command: the agentlightning setup, applied to uvicorn's loggers too."""

from __future__ import annotations

import sys

__all__ = ["LOG_LEVELS", "cli_error_text", "setup_cli_logging"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def setup_cli_logging(level: str) -> None:
    """`HH:MM:SS LEVEL logger: message` lines (rich colour on a terminal), for agentlightning and uvicorn."""
    from agentlightning.logging import setup

    setup(level, color=sys.stderr.isatty(), apply_to=["uvicorn"])


def cli_error_text(exc: BaseException) -> str:
    """An error's message for a command line: advice worded for Python (`port=0`) gets the flag (`--port 0`)."""
    from agentlightning.web.launcher import PortInUseError

    return exc.for_cli() if isinstance(exc, PortInUseError) else str(exc)
