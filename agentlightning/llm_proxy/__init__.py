"""LLM proxy: an OpenAI-compatible endpoint that forwards to model servers and records every call as a span.

Only `LLMProxy` is star-exported; the other names load lazily from their modules so that importing
`agentlightning` does not import FastAPI or aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlightning._lazy import lazy_exports

if TYPE_CHECKING:  # redundant aliases: re-exported for type checkers, loaded lazily at run time
    from .callbacks import LightningOpenTelemetry as LightningOpenTelemetry
    from .callbacks import LogprobsCallback as LogprobsCallback
    from .callbacks import ProxyCallback as ProxyCallback
    from .callbacks import ReturnTokenIdsCallback as ReturnTokenIdsCallback
    from .exporter import LightningSpanExporter as LightningSpanExporter
    from .middleware import MessageInspectionMiddleware as MessageInspectionMiddleware
    from .middleware import ProxyMiddleware as ProxyMiddleware
    from .middleware import RolloutAttemptMiddleware as RolloutAttemptMiddleware
    from .middleware import StreamConversionMiddleware as StreamConversionMiddleware
    from .models import LiteLLMParams as LiteLLMParams
    from .models import ModelConfig as ModelConfig
    from .proxy import LLMProxy as LLMProxy
    from .proxy import get_active_llm_proxy as get_active_llm_proxy
    from .proxy import set_active_llm_proxy as set_active_llm_proxy

__all__ = ["LLMProxy"]

_LAZY = {
    "LLMProxy": ".proxy",
    "get_active_llm_proxy": ".proxy",
    "set_active_llm_proxy": ".proxy",
    "ModelConfig": ".models",
    "LiteLLMParams": ".models",
    "LightningSpanExporter": ".exporter",
    "ProxyCallback": ".callbacks",
    "ReturnTokenIdsCallback": ".callbacks",
    "LogprobsCallback": ".callbacks",
    "LightningOpenTelemetry": ".callbacks",
    "ProxyMiddleware": ".middleware",
    "RolloutAttemptMiddleware": ".middleware",
    "StreamConversionMiddleware": ".middleware",
    "MessageInspectionMiddleware": ".middleware",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
