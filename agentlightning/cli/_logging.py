"""One log format for every `agl` command: the agentlightning setup, applied to uvicorn's loggers too."""

from __future__ import annotations

import sys

__all__ = ["LOG_LEVELS", "setup_cli_logging"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def setup_cli_logging(level: str) -> None:
    """`HH:MM:SS LEVEL logger: message` lines (rich colour on a terminal), for agentlightning and uvicorn."""
    from agentlightning.logging import setup

    setup(level, color=sys.stderr.isatty(), apply_to=["uvicorn"])
