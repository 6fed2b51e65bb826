"""Auto-instrumentation of third-party libraries so their LLM calls carry what training needs.

The `*_INSTALLED` flags only look for the packages (no import), so importing this module stays cheap.
`instrument_all()` installs every available instrumentation: the OpenAI client (always, ours) and,
when installed, AgentOps (token ids on its spans, offline exporters) and, with LangChain too, run names
on the chain spans of AgentOps' LangChain handler.

`instrument_llm_clients()` covers the LLM client libraries (both tracers call it): OpenAI (chat
completions and Responses) now, and the Anthropic SDK and LiteLLM as soon as they are imported. Importing
LiteLLM takes seconds, so a tracer never imports it (or `anthropic`) itself: a one-shot import hook
instruments them when the agent does.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Callable, Optional

__all__ = [
    "AGENTOPS_INSTALLED",
    "LITELLM_INSTALLED",
    "VLLM_INSTALLED",
    "AGENTOPS_LANGCHAIN_INSTALLED",
    "WEAVE_INSTALLED",
    "OPENAI_INSTALLED",
    "ANTHROPIC_INSTALLED",
    "instrument_all",
    "uninstrument_all",
    "instrument_llm_clients",
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
ANTHROPIC_INSTALLED = _installed("anthropic")
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
    instrument_llm_clients()


def uninstrument_all() -> None:
    """Undo `instrument_all()` (and the pending instrumentation of not-yet-imported LLM clients)."""
    with _hook_lock:
        _import_hook.pending.clear()
    for _, installed, _, _, uninstrument in _instrumentations():
        if installed:
            uninstrument()
    if ANTHROPIC_INSTALLED and "anthropic" in sys.modules:
        from .anthropic import uninstrument_anthropic

        uninstrument_anthropic()
    if LITELLM_INSTALLED and "litellm" in sys.modules:
        from .litellm import uninstrument_litellm

        uninstrument_litellm()


# ---- LLM clients instrumented once imported ----


def _instrument_anthropic() -> None:
    from .anthropic import instrument_anthropic

    instrument_anthropic()


def _instrument_litellm() -> None:
    from .litellm import instrument_litellm

    instrument_litellm()


_LAZY_CLIENTS: dict[str, Callable[[], None]] = {"anthropic": _instrument_anthropic, "litellm": _instrument_litellm}


class _InstrumentOnImport(importlib.abc.MetaPathFinder):
    """Runs a module's instrumentation right after the module is first imported (then steps aside)."""

    def __init__(self) -> None:
        self.pending: dict[str, Callable[[], None]] = {}
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        instrument = self.pending.get(fullname)
        if instrument is None or getattr(self._busy, "active", False):
            return None
        self._busy.active = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.active = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader: Any = spec.loader
        original_exec = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            if self.pending.pop(fullname, None) is not None:
                try:
                    instrument()
                except Exception:
                    logger.exception("could not instrument %s after its import", fullname)

        loader.exec_module = exec_module
        return spec


_import_hook = _InstrumentOnImport()
_hook_lock = threading.Lock()


def instrument_llm_clients() -> None:
    """Instrument the OpenAI client now, and the Anthropic SDK and LiteLLM now or when first imported."""
    from .openai import instrument_openai

    instrument_openai()
    installed = {"anthropic": ANTHROPIC_INSTALLED, "litellm": LITELLM_INSTALLED}
    with _hook_lock:
        for module, instrument in _LAZY_CLIENTS.items():
            if not installed[module]:
                continue
            if module in sys.modules:
                _import_hook.pending.pop(module, None)
                instrument()
            else:
                _import_hook.pending[module] = instrument
        if _import_hook.pending and _import_hook not in sys.meta_path:
            sys.meta_path.insert(0, _import_hook)
