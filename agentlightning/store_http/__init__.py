"""The store over HTTP: `LightningStoreServer` serves any `LightningStore`, `LightningStoreClient` reaches it.

The REST API lives under `/v1/agl` (one router per noun in `routes/`), OTLP/HTTP trace ingestion at
`/v1/traces`. Names load on first use, so importing this package does not import fastapi or aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentlightning._lazy import lazy_exports

if TYPE_CHECKING:
    from .client import LightningStoreClient
    from .errors import (
        LightningStoreAuthError,
        LightningStoreNotFoundError,
        LightningStoreNotSupportedError,
        LightningStoreRequestError,
        LightningStoreServerError,
        LightningStoreUnavailableError,
    )
    from .server import DEFAULT_STORE_PORT, LightningStoreServer

__all__ = [
    "LightningStoreServer",
    "LightningStoreClient",
    "DEFAULT_STORE_PORT",
    "LightningStoreAuthError",
    "LightningStoreNotFoundError",
    "LightningStoreNotSupportedError",
    "LightningStoreRequestError",
    "LightningStoreServerError",
    "LightningStoreUnavailableError",
]

_LAZY = {
    "LightningStoreServer": ".server",
    "DEFAULT_STORE_PORT": ".server",
    "LightningStoreClient": ".client",
    "LightningStoreAuthError": ".errors",
    "LightningStoreNotFoundError": ".errors",
    "LightningStoreNotSupportedError": ".errors",
    "LightningStoreRequestError": ".errors",
    "LightningStoreServerError": ".errors",
    "LightningStoreUnavailableError": ".errors",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
