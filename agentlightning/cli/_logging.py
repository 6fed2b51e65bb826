"""One log format for every `agl` command (the agentlightning setup, applied to uvicorn's loggers too) and one way to serve."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Coroutine
from typing import Any

__all__ = ["LOG_LEVELS", "cli_error_text", "run_service", "setup_cli_logging"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def setup_cli_logging(level: str) -> None:
    """`HH:MM:SS LEVEL logger: message` lines (rich colour on a terminal), for agentlightning and uvicorn."""
    from agentlightning.logging import setup

    setup(level, color=sys.stderr.isatty(), apply_to=["uvicorn"])


def cli_error_text(exc: BaseException) -> str:
    """An error's message for a command line: advice worded for Python (`port=0`) gets the flag (`--port 0`)."""
    from agentlightning.web.launcher import PortInUseError

    return exc.for_cli() if isinstance(exc, PortInUseError) else str(exc)


def run_service(command: str, service: Coroutine[Any, Any, Any]) -> int:
    """Run a command's serving coroutine until it ends or Ctrl-C; 1 (the error logged) when it fails to serve."""
    try:
        asyncio.run(service)
    except KeyboardInterrupt:
        pass
    except (OSError, ValueError, RuntimeError) as exc:
        logging.getLogger("agentlightning").error("%s: %s", command, cli_error_text(exc))
        return 1
    return 0
