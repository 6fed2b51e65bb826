"""vLLM instrumentation: make vLLM's OpenAI server return token ids on every chat completion.

Training on token ids needs the prompt and response ids of each call. vLLM >= 0.10.2 returns them when a
request sets `return_token_ids: true`; the LLM proxy adds that field to every call it forwards, so a
proxied setup needs no instrumentation at all. Agents that call vLLM directly do not send the field;
`instrument_vllm()`, run in the process that serves vLLM's OpenAI API, turns it on by default (a request
may still send `return_token_ids: false`). Older vLLM releases have no such field and are refused with
the version to upgrade to: the patches the reference framework applied to their internals are not carried.

Importing this module does not import vLLM; `instrument_vllm()` does, and raises ImportError naming the
package to install when it is missing.
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
from typing import Any, Optional

__all__ = [
    "MIN_VLLM_VERSION",
    "VLLM_REQUEST_MODEL",
    "instrument_vllm",
    "uninstrument_vllm",
    "is_vllm_instrumented",
]

logger = logging.getLogger(__name__)

MIN_VLLM_VERSION = (0, 10, 2)
"""First vLLM release whose OpenAI server knows the request field `return_token_ids`."""

VLLM_REQUEST_MODEL = ("vllm.entrypoints.openai.protocol", "ChatCompletionRequest")
"""Where vLLM defines the pydantic model of a chat-completion request."""

_FIELD = "return_token_ids"
_INSTALL_HINT = "pip install 'vllm>=0.10.2' (a GPU machine), or pip install 'agentlightning[verl]'"

_lock = threading.Lock()
_original_default: Optional[Any] = None
_instrumented = False


def _version_tuple(text: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", text.split("+")[0])[:3]
    return tuple(int(n) for n in numbers)


def _request_model() -> Any:
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as exc:
        raise ImportError(
            f"agentlightning.instrumentation.vllm needs vLLM >= 0.10.2, which is not installed: {_INSTALL_HINT}"
        ) from exc
    version = str(getattr(vllm, "__version__", "0"))
    if _version_tuple(version) < MIN_VLLM_VERSION:
        raise ImportError(
            f"vLLM {version} cannot return token ids; agentlightning supports vLLM >= 0.10.2 "
            f"(`return_token_ids`): {_INSTALL_HINT}"
        )
    module_name, class_name = VLLM_REQUEST_MODEL
    model = getattr(importlib.import_module(module_name), class_name)
    if _FIELD not in model.model_fields:
        raise ImportError(f"vLLM {version}: {module_name}.{class_name} has no `{_FIELD}` field; {_INSTALL_HINT}")
    return model


def instrument_vllm() -> bool:
    """Default `return_token_ids` to true on vLLM chat requests. Returns False when already instrumented.

    Raises ImportError (naming what to install) when vLLM is missing or older than 0.10.2.
    """
    global _original_default, _instrumented
    with _lock:
        if _instrumented:
            return False
        model = _request_model()
        field = model.model_fields[_FIELD]
        _original_default = field.default
        field.default = True
        model.model_rebuild(force=True)
        _instrumented = True
    logger.info("vLLM chat requests now return token ids unless they send %s=false", _FIELD)
    return True


def uninstrument_vllm() -> bool:
    """Restore vLLM's own default. Returns False when nothing was instrumented."""
    global _original_default, _instrumented
    with _lock:
        if not _instrumented:
            return False
        model = _request_model()
        model.model_fields[_FIELD].default = _original_default
        model.model_rebuild(force=True)
        _original_default = None
        _instrumented = False
    return True


def is_vllm_instrumented() -> bool:
    return _instrumented
