"""Logging setup for the `agentlightning` logger tree (console via rich, optional files).

Calling `setup` again replaces the handlers it installed before, so scripts and tests can call it freely.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Optional, Union

__all__ = ["setup", "setup_module", "configure_logger", "DEFAULT_FORMAT", "DEFAULT_DATE_FORMAT"]

DEFAULT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
DEFAULT_DATE_FORMAT = "%H:%M:%S"
_MARKER = "_agentlightning_handler"

LevelLike = Union[int, str]
FilesSpec = Union[str, Sequence[str], Mapping[str, str]]


def _level(level: LevelLike) -> int:
    if isinstance(level, int):
        return level
    resolved = logging.getLevelName(level.upper())
    if not isinstance(resolved, int):
        raise ValueError(f"unknown log level {level!r}; use DEBUG, INFO, WARNING, ERROR or CRITICAL")
    return resolved


def _mark(handler: logging.Handler) -> logging.Handler:
    setattr(handler, _MARKER, True)
    return handler


def _console_handler(color: bool, formatter: Optional[logging.Formatter]) -> logging.Handler:
    """A rich handler on a terminal when `color`; plain lines otherwise (rich would wrap them at 80 columns)."""
    if color and sys.stderr.isatty():
        from rich.console import Console
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(
            console=Console(stderr=True),
            show_path=False,
            markup=False,
            rich_tracebacks=False,
            log_time_format="[%X]",
        )
        handler.setFormatter(formatter or logging.Formatter("%(name)s: %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(formatter or logging.Formatter(DEFAULT_FORMAT, DEFAULT_DATE_FORMAT))
    return _mark(handler)


def _remove_own_handlers(logger: logging.Logger) -> None:
    for handler in list(logger.handlers):
        if getattr(handler, _MARKER, False):
            logger.removeHandler(handler)
            handler.close()


def _file_targets(files: Optional[FilesSpec], default_logger: str) -> list[tuple[str, str]]:
    """(logger name, path) pairs: a str or list of str logs the main tree; a mapping names loggers."""
    if files is None:
        return []
    if isinstance(files, str):
        return [(default_logger, files)]
    if isinstance(files, Mapping):
        return [(name, path) for name, path in files.items()]
    return [(default_logger, path) for path in files]


def _disable_foreign_loggers(keep: Sequence[str]) -> None:
    for name, existing in logging.root.manager.loggerDict.items():
        if not isinstance(existing, logging.Logger):
            continue
        if any(name == k or name.startswith(k + ".") for k in keep):
            continue
        existing.disabled = True


def setup(
    level: LevelLike = "INFO",
    *,
    console: bool = True,
    color: bool = True,
    propagate: bool = False,
    disable_existing_loggers: bool = False,
    capture_warnings: bool = False,
    submodule_levels: Optional[Mapping[str, LevelLike]] = None,
    extra_handlers: Optional[Sequence[logging.Handler]] = None,
    formatter: Optional[Union[logging.Formatter, str]] = None,
    apply_to: Optional[Sequence[str]] = None,
    files: Optional[FilesSpec] = None,
) -> logging.Logger:
    """Configure the `agentlightning` logger (and loggers named in `apply_to`) and return it.

    Args:
        submodule_levels: per-logger levels, e.g. `{"agentlightning.store": "DEBUG"}`.
        apply_to: other logger names (e.g. `"uvicorn"`) that get the same handlers and level.
        files: a path (or list of paths) receiving the `agentlightning` tree, or a mapping logger name -> path.
        disable_existing_loggers: silence every already-created logger outside the configured trees.
    """
    fmt = logging.Formatter(formatter, DEFAULT_DATE_FORMAT) if isinstance(formatter, str) else formatter
    root_name = "agentlightning"
    targets = [root_name, *(apply_to or [])]
    numeric_level = _level(level)

    for name in targets:
        logger = logging.getLogger(name)
        _remove_own_handlers(logger)
        logger.setLevel(numeric_level)
        logger.propagate = propagate
        logger.disabled = False
        if console:
            logger.addHandler(_console_handler(color, fmt))
        for handler in extra_handlers or ():
            if handler not in logger.handlers:
                logger.addHandler(handler)

    for name, path in _file_targets(files, root_name):
        logger = logging.getLogger(name)
        if name not in targets:
            _remove_own_handlers(logger)
            logger.setLevel(numeric_level)
            logger.propagate = propagate
        file_handler = logging.FileHandler(path, encoding="utf-8")
        file_handler.setFormatter(fmt or logging.Formatter(DEFAULT_FORMAT, "%Y-%m-%d %H:%M:%S"))
        logger.addHandler(_mark(file_handler))

    for name, sub_level in (submodule_levels or {}).items():
        logging.getLogger(name).setLevel(_level(sub_level))

    if capture_warnings:
        logging.captureWarnings(True)
        warnings_logger = logging.getLogger("py.warnings")
        _remove_own_handlers(warnings_logger)
        if console:
            warnings_logger.addHandler(_console_handler(color, fmt))

    if disable_existing_loggers:
        keep = [*targets, *(name for name, _ in _file_targets(files, root_name)), "py.warnings"]
        _disable_foreign_loggers(keep)

    return logging.getLogger(root_name)


def setup_module(
    level: LevelLike = "INFO",
    *,
    name: str = "agentlightning",
    console: bool = True,
    color: bool = True,
    propagate: bool = False,
    disable_existing_loggers: bool = False,
) -> logging.Logger:
    """Configure one named logger (console only) and return it."""
    logger = logging.getLogger(name)
    _remove_own_handlers(logger)
    logger.setLevel(_level(level))
    logger.propagate = propagate
    logger.disabled = False
    if console:
        logger.addHandler(_console_handler(color, None))
    if disable_existing_loggers:
        _disable_foreign_loggers([name])
    return logger


def configure_logger(level: LevelLike = logging.INFO, name: str = "agentlightning") -> logging.Logger:
    """Deprecated: use `agentlightning.setup_logging` (alias of `agentlightning.logging.setup`)."""
    warnings.warn(
        "configure_logger is deprecated; use agentlightning.setup_logging(...) instead",
        DeprecationWarning,
        stacklevel=2,
    )
    return setup_module(level, name=name, color=False)
