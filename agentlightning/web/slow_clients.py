"""Slow clients are cut off: headers and bodies must arrive in time on every server we start.

uvicorn waits forever for a request that trickles in (it only times out idle keep-alive connections), so
a few connections sending one byte now and then can hold a server's file descriptors and workers. The
protocol here answers 408 and closes a connection whose request headers are not complete `header_timeout`
seconds after its first byte, or whose body stops arriving for `body_timeout` seconds, or falls behind
`body_min_rate` bytes per second after a `body_grace` (a body sent one byte every 2 s is cut after about
`body_grace` seconds), or is not complete `body_deadline` seconds after its headers. Nothing is timed once
a request is in: handlers, long-polls and streamed answers take as long as they need.

File descriptors are shared fairly too: when this process's connections reach three quarters of its
descriptor limit (`RLIMIT_NOFILE`), each new connection closes the one that has waited longest without
a complete request (an idle keep-alive connection or a slow sender), so slow clients cannot starve
prompt ones.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, ClassVar, Optional

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
    "DEFAULT_BODY_GRACE",
    "DEFAULT_BODY_MIN_RATE",
    "connection_budget",
]

logger = logging.getLogger(__name__)

#: Seconds from a request's first byte to the end of its headers.
DEFAULT_HEADER_TIMEOUT = 15.0
#: Seconds a request body may pause between two pieces.
DEFAULT_BODY_TIMEOUT = 30.0
#: Seconds from the end of the headers to the end of the body at most (16 MiB at about 56 kB/s).
DEFAULT_BODY_DEADLINE = 300.0
#: Seconds a body may take before it must keep up with `DEFAULT_BODY_MIN_RATE`.
DEFAULT_BODY_GRACE = 10.0
#: Bytes per second a body must average after its grace: each byte received buys 1/rate seconds more.
DEFAULT_BODY_MIN_RATE = 16 * 1024.0


def connection_budget() -> int:
    """Connections this process may hold before new ones push out the longest-waiting: 3/4 of its fd limit."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):  # not POSIX
        return 1 << 30
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 1 << 30
    return max(8, soft * 3 // 4)


_REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class SlowClientGuardProtocol(_UvicornProtocol):  # type: ignore[misc, valid-type]
    """uvicorn's HTTP protocol with header and body timeouts (read from the `uvicorn.Config` it serves)."""

    open_connections: ClassVar[set[SlowClientGuardProtocol]] = set()
    """Every connection of this process (all servers share its descriptors)."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._header_timeout: float = getattr(config, "header_timeout", DEFAULT_HEADER_TIMEOUT)
        self._body_timeout: float = getattr(config, "body_timeout", DEFAULT_BODY_TIMEOUT)
        self._body_deadline: float = getattr(config, "body_deadline", DEFAULT_BODY_DEADLINE)
        self._body_grace: float = getattr(config, "body_grace", DEFAULT_BODY_GRACE)
        self._body_min_rate: float = getattr(config, "body_min_rate", DEFAULT_BODY_MIN_RATE)
        self._guard: Optional[asyncio.TimerHandle] = None
        self._guarded_cycle: Any = None
        self._awaiting_request = True  # the next bytes begin a request
        self._body_started = 0.0
        self._body_received = 0
        self._waiting_since = time.monotonic()  # since when it holds a descriptor without a complete request

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
        self._cut(transport, answer=True)

    def _cut(self, transport: asyncio.BaseTransport, answer: bool) -> None:
        """Close, with a 408 when a request was arriving and no answer has begun."""
        cycle = self.cycle
        if answer and not (cycle is not None and getattr(cycle, "response_started", False)):
            transport.write(_REQUEST_TIMEOUT)  # type: ignore[attr-defined]
        transport.close()

    def _waiting(self) -> bool:
        """Holding a descriptor without a complete request: idle keep-alive, or headers / body arriving."""
        cycle = self.cycle
        return self._awaiting_request or (cycle is not None and getattr(cycle, "more_body", False))

    def _make_room(self) -> None:
        """Past the budget, close the longest-waiting connections down to half of it.

        Freeing many at once matters: asyncio accepts a burst of connections before any of them runs this,
        and once `accept` fails (EMFILE) no new connection would come to free descriptors.
        """
        connections = type(self).open_connections
        budget = connection_budget()
        if len(connections) <= budget:
            return
        live = [c for c in connections if not _closing(c)]
        if len(live) <= budget // 2:
            return
        waiting = sorted(
            (c for c in connections if c is not self and c._waiting() and not _closing(c)),
            key=lambda c: c._waiting_since,
        )
        excess = len(live) - budget // 2
        logger.warning("%d connections near the descriptor limit: closing the %d waiting longest", len(live), excess)
        for victim in waiting[:excess]:
            transport = victim.transport
            if transport is not None and not transport.is_closing():
                answer = victim._guard is not None  # a request was arriving (an idle keep-alive one was not)
                victim._disarm()
                victim._cut(transport, answer)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        type(self).open_connections.add(self)
        self._arm(self._header_timeout, "headers")
        self._make_room()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        type(self).open_connections.discard(self)
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
            self._body_received = 0
        else:
            self._body_received += len(data)
        if getattr(cycle, "more_body", False):
            now = time.monotonic()
            earned = self._body_grace + self._body_received / self._body_min_rate
            deadline = self._body_started + min(self._body_deadline, earned)
            self._arm(max(0.0, min(self._body_timeout, deadline - now)), "body")
        elif self._guard is not None and not self._awaiting_request:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._awaiting_request = True  # uvicorn's keep-alive timeout covers the wait for its first byte
        self._waiting_since = time.monotonic()


def guarded_config(
    app: Any,
    *,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    body_deadline: float = DEFAULT_BODY_DEADLINE,
    body_grace: float = DEFAULT_BODY_GRACE,
    body_min_rate: float = DEFAULT_BODY_MIN_RATE,
    **kwargs: Any,
) -> uvicorn.Config:
    """A `uvicorn.Config` serving `app` with `SlowClientGuardProtocol` and these timeouts."""
    for name, value in (
        ("header_timeout", header_timeout),
        ("body_timeout", body_timeout),
        ("body_deadline", body_deadline),
        ("body_grace", body_grace),
        ("body_min_rate", body_min_rate),
    ):
        if not value > 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    config = uvicorn.Config(app, http=SlowClientGuardProtocol, **kwargs)
    config.header_timeout = header_timeout  # type: ignore[attr-defined]
    config.body_timeout = body_timeout  # type: ignore[attr-defined]
    config.body_deadline = body_deadline  # type: ignore[attr-defined]
    config.body_grace = body_grace  # type: ignore[attr-defined]
    config.body_min_rate = body_min_rate  # type: ignore[attr-defined]
    return config


def _closing(connection: SlowClientGuardProtocol) -> bool:
    transport = connection.transport
    return transport is None or transport.is_closing()
