"""Auto-instrumentation of third-party libraries so their LLM calls carry what training needs.

The `*_INSTALLED` flags only look for the packages (no import), so importing this module stays cheap.
`instrument_all()` installs every available instrumentation: the OpenAI client (always, ours) and,
when installed, AgentOps (token ids on its spans, offline exporters) and, with LangChain too, run names
on the chain spans of AgentOps' LangChain handler.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Callable

__all__ = [
    "AGENTOPS_INSTALLED",
    "LITELLM_INSTALLED",
    "VLLM_INSTALLED",
    "AGENTOPS_LANGCHAIN_INSTALLED",
    "WEAVE_INSTALLED",
    "OPENAI_INSTALLED",
    "instrument_all",
    "uninstrument_all",
]

logger = logging.getLogger(__name__)


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


OPENAI_INSTALLED = _installed("openai")
AGENTOPS_INSTALLED = _installed("agentops")
LITELLM_INSTALLED = _installed("litellm")
VLLM_INSTALLED = _installed("vllm")
WEAVE_INSTALLED = _installed("weave")
AGENTOPS_LANGCHAIN_INSTALLED = AGENTOPS_INSTALLED and _installed("langchain_core")

_warned_missing: set[str] = set()


def _warn_missing(library: str, extra: str) -> None:
    if library not in _warned_missing:
        _warned_missing.add(library)
        logger.warning(
            "%s is not installed; skipping its instrumentation (pip install agentlightning[%s])", library, extra
        )


def _instrumentations() -> list[tuple[str, bool, str, Callable[[], object], Callable[[], object]]]:
    """(library, installed, extra, instrument, uninstrument) for every instrumentation we ship."""

    def openai_on() -> object:
        from .openai import instrument_openai

        return instrument_openai()

    def openai_off() -> object:
        from .openai import uninstrument_openai

        return uninstrument_openai()

    def agentops_on() -> object:
        from .agentops import instrument_agentops

        return instrument_agentops()

    def agentops_off() -> object:
        from .agentops import uninstrument_agentops

        return uninstrument_agentops()

    def agentops_langchain_on() -> object:
        from .agentops_langchain import instrument_agentops_langchain

        return instrument_agentops_langchain()

    def agentops_langchain_off() -> object:
        from .agentops_langchain import uninstrument_agentops_langchain

        return uninstrument_agentops_langchain()

    instrumentations = [
        ("openai", OPENAI_INSTALLED, "openai", openai_on, openai_off),
        ("agentops", AGENTOPS_INSTALLED, "agentops", agentops_on, agentops_off),
    ]
    if AGENTOPS_LANGCHAIN_INSTALLED:  # an add-on of the two libraries: nothing to warn about when absent
        instrumentations.append(
            ("agentops+langchain", True, "agentops,langchain", agentops_langchain_on, agentops_langchain_off)
        )
    return instrumentations


def instrument_all() -> None:
    """Install every instrumentation whose library is installed; warn once about the missing ones."""
    for library, installed, extra, instrument, _ in _instrumentations():
        if installed:
            instrument()
        else:
            _warn_missing(library, extra)


def uninstrument_all() -> None:
    """Undo `instrument_all()`."""
    for _, installed, _, _, uninstrument in _instrumentations():
        if installed:
            uninstrument()
