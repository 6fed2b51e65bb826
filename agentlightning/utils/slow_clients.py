"""Slow clients are cut off: headers and bodies must arrive in time on every server we start.

uvicorn waits forever for a request that trickles in (it only times out idle keep-alive connections), so
a few connections sending one byte now and then can hold a server's file descriptors and workers. The
protocol here closes a connection whose request headers are not complete `header_timeout` seconds after
its first byte (answering 408), or whose body stops arriving for `body_timeout` seconds or is not complete
`body_deadline` seconds after its headers. Nothing is timed once a request is in: handlers, long-polls
and streamed answers take as long as they need.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional

import uvicorn

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _UvicornProtocol
except ImportError:  # httptools is optional for uvicorn; h11 is always there
    from uvicorn.protocols.http.h11_impl import H11Protocol as _UvicornProtocol  # type: ignore[assignment]

__all__ = [
    "SlowClientGuardProtocol",
    "guarded_config",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_BODY_DEADLINE",
]

logger = logging.getLogger(__name__)

#: Seconds from a request's first byte to the end of its headers.
DEFAULT_HEADER_TIMEOUT = 15.0
#: Seconds a request body may pause between two pieces.
DEFAULT_BODY_TIMEOUT = 30.0
#: Seconds from the end of the headers to the end of the body (16 MiB at about 56 kB/s).
DEFAULT_BODY_DEADLINE = 300.0

_REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class SlowClientGuardProtocol(_UvicornProtocol):  # type: ignore[misc, valid-type]
    """uvicorn's HTTP protocol with header and body timeouts (read from the `uvicorn.Config` it serves)."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._header_timeout: float = getattr(config, "header_timeout", DEFAULT_HEADER_TIMEOUT)
        self._body_timeout: float = getattr(config, "body_timeout", DEFAULT_BODY_TIMEOUT)
        self._body_deadline: float = getattr(config, "body_deadline", DEFAULT_BODY_DEADLINE)
        self._guard: Optional[asyncio.TimerHandle] = None
        self._guarded_cycle: Any = None
        self._awaiting_request = True  # the next bytes begin a request
        self._body_started = 0.0

    def _arm(self, delay: float, what: str) -> None:
        self._disarm()
        self._guard = asyncio.get_running_loop().call_later(delay, self._expired, what)

    def _disarm(self) -> None:
        if self._guard is not None:
            self._guard.cancel()
            self._guard = None

    def _expired(self, what: str) -> None:
        self._guard = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        logger.info("closing the connection of %s: its request %s did not arrive in time", self.client, what)
        if what == "headers":
            transport.write(_REQUEST_TIMEOUT)
        transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self._header_timeout, "headers")

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._awaiting_request and self._guard is None:  # the first byte of the next keep-alive request
            self._arm(self._header_timeout, "headers")
        super().data_received(data)
        cycle = self.cycle
        if cycle is None or self.transport.is_closing():
            return
        if cycle is not self._guarded_cycle:  # this data completed a request's headers
            self._guarded_cycle = cycle
            self._awaiting_request = False
            self._body_started = time.monotonic()
        if getattr(cycle, "more_body", False):
            remaining = self._body_started + self._body_deadline - time.monotonic()
            self._arm(max(0.0, min(self._body_timeout, remaining)), "body")
        elif self._guard is not None and not self._awaiting_request:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._awaiting_request = True  # uvicorn's keep-alive timeout covers the wait for its first byte


def guarded_config(
    app: Any,
    *,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    body_deadline: float = DEFAULT_BODY_DEADLINE,
    **kwargs: Any,
) -> uvicorn.Config:
    """A `uvicorn.Config` serving `app` with `SlowClientGuardProtocol` and these timeouts."""
    for name, value in (
        ("header_timeout", header_timeout),
        ("body_timeout", body_timeout),
        ("body_deadline", body_deadline),
    ):
        if not value > 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    config = uvicorn.Config(app, http=SlowClientGuardProtocol, **kwargs)
    config.header_timeout = header_timeout  # type: ignore[attr-defined]
    config.body_timeout = body_timeout  # type: ignore[attr-defined]
    config.body_deadline = body_deadline  # type: ignore[attr-defined]
    return config
