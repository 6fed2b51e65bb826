"""Once-per-process deprecation warnings for legacy entry points."""

from __future__ import annotations

import threading
import warnings

__all__ = ["warn_deprecated_once", "reset_deprecation_warnings"]

_warned: set[str] = set()
_lock = threading.Lock()


def warn_deprecated_once(key: str, message: str, *, stacklevel: int = 3) -> None:
    """Emit `DeprecationWarning(message)` the first time `key` is seen in this process, then stay silent."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def reset_deprecation_warnings() -> None:
    """Forget which warnings were emitted (for tests that check the warning itself)."""
    with _lock:
        _warned.clear()
