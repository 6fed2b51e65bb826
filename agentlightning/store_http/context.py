"""What a route reads from the app serving it: the store, and the serving state that ends long-polls."""

from __future__ import annotations

import asyncio
from typing import Optional

from fastapi import Request

from agentlightning.store.base import LightningStore

__all__ = ["API_PREFIX", "HEALTH_PATH", "ServingState", "store_of", "serving_of"]

API_PREFIX = "/v1/agl"
HEALTH_PATH = API_PREFIX + "/health"


def store_of(request: Request) -> LightningStore:
    """The store served by the app handling `request` (route objects are shared by every app)."""
    return request.app.state.agl_store


def serving_of(request: Request) -> ServingState:
    return request.app.state.agl_serving


class ServingState:
    """What the running app knows about its event loop; lets the owner end long-polls at shutdown."""

    def __init__(self) -> None:
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.shutdown: Optional[asyncio.Future[None]] = None

    def started(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.shutdown = self.loop.create_future()

    def request_shutdown(self) -> None:
        """Wake every pending long-poll (callable from any thread)."""
        loop, future = self.loop, self.shutdown
        if loop is None or future is None or loop.is_closed():
            return

        def _set() -> None:
            if not future.done():
                future.set_result(None)

        try:
            if loop is asyncio.get_running_loop():
                _set()
                return
        except RuntimeError:
            pass
        try:
            loop.call_soon_threadsafe(_set)
        except RuntimeError:
            pass  # the loop closed meanwhile: nothing left to wake
