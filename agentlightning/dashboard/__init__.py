"""The web dashboard the store server shows at `/`: rollouts, span trees, triplets, resources, workers, curves.

The pages are plain HTML/CSS/JavaScript modules in `static/` (nothing to build); `routes` adds the few
endpoints they need beyond the store's REST API. Whoever starts a store server adds it: `LightningStoreServer(store, routers=[dashboard_router()])`.
This package sits above the adapter layer (it shows triplets); it imports fastapi only when mounted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .routes import STATIC_DIR, build_dashboard_router, dashboard_router, mount_dashboard

__all__ = ["STATIC_DIR", "build_dashboard_router", "dashboard_router", "mount_dashboard"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import routes

        return getattr(routes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
