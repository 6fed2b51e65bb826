"""Make leaked async SDK clients harmless to the event loop that runs the next rollout.

Agents often build an `AsyncOpenAI` per rollout and never close it. The OpenAI SDK (and the Anthropic SDK,
generated from the same template) gives its default HTTP client a `__del__` that schedules `aclose()` on
whatever event loop is running when the garbage collector takes the client. That is unsafe:

1. the server closes the idle keep-alive connection, so asyncio stops watching the socket (EOF) and
   nothing but the client keeps the transport alive;
2. the collector finalizes the whole cycle at once: the socket's finalizer closes its file descriptor,
   and the client's `__del__` resurrects the transport by scheduling `aclose()`;
3. the loop opens a new connection (the next LLM call) and the kernel hands out the same descriptor
   number, with a reader registered for it;
4. the scheduled `aclose()` aborts the old transport, whose `_remove_reader(fd)` now unregisters the
   *new* connection's reader: its response sits unread in the socket buffer and the call waits forever.

A runner executes thousands of rollouts on one long-lived loop, so it meets this race (a rollout stuck in
`preparing` with its agent waiting on a reply that has arrived). `install_safe_client_finalizers()`
replaces those `__del__` methods with ones that leave a collected client's connections to the garbage
collector, as a plain `httpx.AsyncClient` does: sockets still registered stay open until the server
closes them, and nothing touches a descriptor number after it was freed.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from typing import Any

__all__ = ["install_safe_client_finalizers", "SDK_CLIENT_MODULES"]

logger = logging.getLogger(__name__)

# Modules defining an `AsyncHttpxClientWrapper` with the unsafe `__del__`. openai is patched whenever it is
# installed (it is a core dependency); the others only once the agent has imported them.
SDK_CLIENT_MODULES = ("openai._base_client", "anthropic._base_client")
_ALWAYS_IMPORT = frozenset({"openai._base_client"})

_MARK = "__agentlightning_safe_del__"
_lock = threading.Lock()


def _leave_connections_to_the_collector(self: Any) -> None:
    """Finalizer of a collected SDK client: schedule nothing (see the module docstring)."""
    return None


setattr(_leave_connections_to_the_collector, _MARK, True)


def install_safe_client_finalizers() -> list[str]:
    """Patch the async SDK clients that are importable now (idempotent); returns the modules patched."""
    patched: list[str] = []
    with _lock:
        for name in SDK_CLIENT_MODULES:
            module = sys.modules.get(name)
            if module is None and name in _ALWAYS_IMPORT:
                try:
                    module = importlib.import_module(name)
                except ImportError:
                    module = None
            wrapper = getattr(module, "AsyncHttpxClientWrapper", None) if module is not None else None
            if wrapper is None or "__del__" not in wrapper.__dict__:
                continue
            if not getattr(wrapper.__dict__["__del__"], _MARK, False):
                wrapper.__del__ = _leave_connections_to_the_collector
                logger.debug("replaced %s.AsyncHttpxClientWrapper.__del__ (unsafe aclose on collection)", name)
            patched.append(name)
    return patched
