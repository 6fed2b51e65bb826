"""Keep web pages out of a local server: refuse cross-site requests and foreign `Host` names.

Every server we ship runs it (see `hardening`). A page the user visits can make the browser send requests to
`http://127.0.0.1:4747`: a `text/plain`
POST needs no CORS preflight, so it runs even though the page cannot read the answer; and with DNS
rebinding (`evil.example` resolving to 127.0.0.1) the page is even same-origin with the server. Programs
(runners, the CLI, `LightningStoreClient`) send neither `Origin` nor `Sec-Fetch-Site` and name the server
by an address or a name of this machine, so they pass; the dashboard is served from the same origin as
the API, so its requests pass too.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Sequence
from typing import Optional
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import ErrorShape, detail_error_body

__all__ = ["BrowserGuardMiddleware", "default_allowed_hosts"]

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def default_allowed_hosts(extra: Iterable[str] = ()) -> frozenset[str]:
    """Names a request may give in `Host` besides IP addresses: localhost, this machine's name, and `extra`."""
    names = {"localhost", socket.gethostname().lower(), *(name.strip().lower() for name in extra)}
    return frozenset(name for name in names if name)


def _split_host(value: str) -> tuple[str, Optional[int]]:
    """`"[::1]:80"` -> `("::1", 80)`, `"Example.com"` -> `("example.com", None)`."""
    parsed = urlsplit("//" + value)
    try:
        port = parsed.port
    except ValueError:
        port = -1  # not a port: no origin will match it
    return (parsed.hostname or "").lower(), port


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class BrowserGuardMiddleware:
    """Pure ASGI middleware answering 403 to requests a web page made a browser send.

    - `Host` must be an IP address, `localhost` (or `*.localhost`) or one of `allowed_hosts`; None skips this
      check (a server with a token: a rebound page has no token to send).
    - A request with an `Origin` header must come from the server's own origin or one of `allowed_origins`
      (`"*"` allows any); without `Origin`, a `Sec-Fetch-Site: cross-site / same-site` request to an API
      path is refused likewise (page navigations, e.g. a link to the dashboard, are not API paths).
    """

    def __init__(
        self,
        app: ASGIApp,
        allowed_hosts: Optional[frozenset[str]],
        allowed_origins: Sequence[str] = (),
        api_prefix: str = "/v1/",
        error_shape: ErrorShape = detail_error_body,
        hint: str = "`agl store --allowed-host NAME` / LightningStoreServer(allowed_hosts=[...])",
        origin_hint: str = "`agl store --cors-origin ORIGIN` / LightningStoreServer(cors_allow_origins=[...])",
    ) -> None:
        self.app = app
        self.error_shape = error_shape
        self.hint = hint
        self.origin_hint = origin_hint
        self.allowed_hosts = allowed_hosts
        self.any_origin = "*" in allowed_origins
        self.allowed_origins = frozenset(origin.rstrip("/").lower() for origin in allowed_origins)
        self.api_prefix = api_prefix

    def _host_allowed(self, host: str) -> bool:
        if self.allowed_hosts is None or not host:
            return True
        name, _ = _split_host(host)
        return _is_ip(name) or name == "localhost" or name.endswith(".localhost") or name in self.allowed_hosts

    def _same_origin(self, origin: str, scheme: str, host: str) -> bool:
        parsed = urlsplit(origin)
        try:
            origin_port = parsed.port or _DEFAULT_PORTS.get(parsed.scheme)
        except ValueError:
            return False
        name, port = _split_host(host)
        return (
            parsed.scheme == scheme
            and (parsed.hostname or "").lower() == name
            and origin_port == (port or _DEFAULT_PORTS.get(scheme))
        )

    def _refusal(self, scope: Scope) -> Optional[str]:
        headers = {key.decode(): value.decode("latin-1") for key, value in scope["headers"] if key in _HEADERS}
        host = headers.get("host", "")
        if not self._host_allowed(host):
            return (
                f"Host {host!r} is not a name of this server: requests for other names (a web page using DNS "
                "rebinding) are refused. Use the server's IP address or localhost, or allow the name with "
                f"{self.hint}"
            )
        origin = headers.get("origin")
        if origin is not None:
            if self.any_origin or origin.rstrip("/").lower() in self.allowed_origins:
                return None
            if self._same_origin(origin, scope.get("scheme", "http"), host):
                return None
            return (
                f"cross-origin request from {origin!r} refused: a web page may not use this server. Allow the "
                f"origin with {self.origin_hint}"
            )
        site = headers.get("sec-fetch-site")
        if site in ("cross-site", "same-site") and scope["path"].startswith(self.api_prefix):
            return f"cross-site request (Sec-Fetch-Site: {site}) refused: a web page may not use this server"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reason = self._refusal(scope)
        if reason is None:
            await self.app(scope, receive, send)
            return
        body = self.error_shape(403, reason, "ForbiddenOrigin")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 403, "headers": headers})
        await send({"type": "http.response.body", "body": body})


_HEADERS = frozenset({b"host", b"origin", b"sec-fetch-site"})
