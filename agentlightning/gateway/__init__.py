"""The harness gateway: rollout-scoped OpenAI endpoints and an events API for agents that never import us.

`Gateway` serves them over any store; `agl gateway` runs it as a service; `ProcessAgent` starts agents
(any language) with their URLs and key. Names load lazily so importing this package stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlightning._lazy import lazy_exports

if TYPE_CHECKING:
    from .config import GatewayConfig as GatewayConfig
    from .keys import attempt_key as attempt_key
    from .server import Gateway as Gateway
    from .server import rollout_urls as rollout_urls

__all__ = ["Gateway", "GatewayConfig", "attempt_key", "rollout_urls"]

_LAZY = {"Gateway": ".server", "rollout_urls": ".server", "GatewayConfig": ".config", "attempt_key": ".keys"}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
