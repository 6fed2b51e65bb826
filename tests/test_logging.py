"""Logging setup of the agentlightning logger tree."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentlightning
import agentlightning.logging as agl_logging


@pytest.fixture(autouse=True)
def restore_loggers() -> Iterator[None]:
    names = ["agentlightning", "agentlightning.store", "third.party", "py.warnings"]
    saved = {
        n: (logging.getLogger(n).level, logging.getLogger(n).propagate, list(logging.getLogger(n).handlers))
        for n in names
    }
    yield
    for name, (level, propagate, handlers) in saved.items():
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if handler not in handlers:
                logger.removeHandler(handler)
                handler.close()
        logger.setLevel(level)
        logger.propagate = propagate
        logger.disabled = False
    logging.captureWarnings(False)


def _own_handlers(name: str) -> list[logging.Handler]:
    return [h for h in logging.getLogger(name).handlers if getattr(h, "_agentlightning_handler", False)]


def test_setup_is_idempotent_and_sets_level() -> None:
    agl_logging.setup("DEBUG", color=False)
    agl_logging.setup("WARNING", color=False)
    logger = logging.getLogger("agentlightning")
    assert logger.level == logging.WARNING
    assert len(_own_handlers("agentlightning")) == 1
    assert logger.propagate is False


def test_setup_writes_files_and_submodule_levels(tmp_path: Path) -> None:
    log_file = tmp_path / "agl.log"
    agl_logging.setup(
        "INFO",
        console=False,
        files=str(log_file),
        submodule_levels={"agentlightning.store": "ERROR"},
        apply_to=["third.party"],
    )
    logging.getLogger("agentlightning.trainer").info("trainer says hi")
    logging.getLogger("agentlightning.store").warning("store warning is filtered")
    for handler in _own_handlers("agentlightning"):
        handler.flush()
    text = log_file.read_text()
    assert "trainer says hi" in text
    assert "store warning is filtered" not in text
    assert logging.getLogger("third.party").level == logging.INFO


def test_setup_rejects_unknown_level() -> None:
    with pytest.raises(ValueError, match="unknown log level 'LOUD'"):
        agl_logging.setup("LOUD")


def test_setup_module_and_deprecated_configure_logger() -> None:
    logger = agl_logging.setup_module("DEBUG", name="agentlightning.store", color=False)
    assert logger.name == "agentlightning.store" and logger.level == logging.DEBUG
    with pytest.warns(DeprecationWarning, match="configure_logger is deprecated"):
        legacy = agentlightning.configure_logger()
    assert legacy.name == "agentlightning"


def test_top_level_aliases() -> None:
    assert agentlightning.setup_logging is agl_logging.setup
    assert agentlightning.setup_module_logging is agl_logging.setup_module


def test_capture_warnings_routes_to_logging() -> None:
    agl_logging.setup(console=False, capture_warnings=True)
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    collector = Collect()
    logging.getLogger("py.warnings").addHandler(collector)
    try:
        import warnings

        warnings.warn("captured warning", UserWarning, stacklevel=1)
    finally:
        logging.getLogger("py.warnings").removeHandler(collector)
    assert any("captured warning" in r.getMessage() for r in records)
