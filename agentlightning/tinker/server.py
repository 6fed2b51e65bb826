"""`TinkerServer`: a `TinkerService` behind uvicorn on a background thread (what `agl tinker` runs)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Optional

from ..web.background import BackgroundServer
from .app import build_app
from .config import TinkerConfig
from .service import TinkerService

if TYPE_CHECKING:
    from ..store.base import LightningStore
    from ..web.launcher import PythonServerLauncher

__all__ = ["TinkerServer"]

logger = logging.getLogger(__name__)


class TinkerServer(BackgroundServer):
    """Serve the Tinker API on `config.host:config.port`; `base_url` is what `tinker.ServiceClient` takes.

    With a `store`, every sampling session's calls are recorded as LLM spans there (`recording.py`).
    """

    def __init__(self, config: TinkerConfig, store: Optional[LightningStore] = None) -> None:
        self.config = config
        self.service = TinkerService(config, store)
        self.app = build_app(self.service)
        self._launcher: Optional[PythonServerLauncher] = None

    @property
    def base_url(self) -> str:
        if self._launcher is None or self._launcher.port is None:
            raise RuntimeError("the Tinker server has no port yet; call start() first")
        return self._launcher.access_endpoint

    def start(self) -> None:
        """Start uvicorn on a thread; returns once `/api/v1/healthz` answers."""
        from ..web.launcher import PythonServerLauncher, PythonServerLauncherArgs

        args = PythonServerLauncherArgs(
            host=self.config.host,
            port=self.config.port or None,
            launch_mode="thread",
            healthcheck_url="/api/v1/healthz",
        )
        self._launcher = PythonServerLauncher(self.app, args)
        _run(self._launcher.start())
        logger.info("agl tinker listening on %s", self.base_url)

    def stop(self) -> None:
        if self._launcher is not None:
            _run(self._launcher.stop())
            self._launcher = None
        self.service.close()


def _run(coroutine: Any) -> Any:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    raise RuntimeError("TinkerServer.start/stop block; call them outside a running event loop")
