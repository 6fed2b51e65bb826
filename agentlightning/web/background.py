"""`BackgroundServer`: `with` and `run_forever` for a server whose `start()` runs uvicorn on a thread."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional, TypeVar

if TYPE_CHECKING:
    from .launcher import PythonServerLauncher

__all__ = ["BackgroundServer"]

_S = TypeVar("_S", bound="BackgroundServer")


class BackgroundServer:
    """A server with blocking `start()` / `stop()` around `self._launcher` (None until started)."""

    _launcher: Optional[PythonServerLauncher]

    def start(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement start")

    def stop(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement stop")

    def run_forever(self) -> None:
        """Serve until interrupted (what the `agl` commands run)."""
        self.start()
        try:
            while self._launcher is not None and self._launcher.is_running():
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def __enter__(self: _S) -> _S:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
