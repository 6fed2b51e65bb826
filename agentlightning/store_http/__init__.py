"""The store over HTTP: `LightningStoreServer` serves any `LightningStore`, `LightningStoreClient` reaches it.

The REST API lives under `/v1/agl` (one router per noun in `routes/`), OTLP/HTTP trace ingestion at
`/v1/traces`. Names load on first use, so importing this package does not import fastapi or aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
