"""A fault-injecting HTTP proxy on 127.0.0.1, to put in front of `agl store` in chaos tests.

Each request is, by a seeded draw: answered with a 5xx without reaching the server (`error_rate`),
held for a random delay and then forwarded (`delay_rate`, up to `max_delay` seconds), or forwarded
as is. With `lost_response_rate` the request reaches the server but its answer is replaced by a 502,
as when a connection drops after the server committed (only idempotent requests survive that). A
server that is down answers 502, as a real reverse proxy does. `FaultStats` counts what happened.

The proxy runs on its own event loop in a daemon thread, so a synchronous test can start and stop it;
`python -m tests.support.faulty_proxy UPSTREAM --port N` runs one standalone.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import threading
from dataclasses import dataclass, field
from typing import Optional

import aiohttp
from aiohttp import web

__all__ = ["FaultStats", "FaultyProxy"]

# Hop-by-hop headers (RFC 9110 7.6.1) and those aiohttp recomputes for the new message.
_DROPPED_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_INJECTED_STATUSES = (500, 502, 503, 504)


@dataclass
class FaultStats:
    """What the proxy did, by kind; `errors_by_status` splits the injected 5xx answers."""

    requests: int = 0
    forwarded: int = 0
    injected_errors: int = 0
    delayed: int = 0
    lost_responses: int = 0
    upstream_down: int = 0
    errors_by_status: dict[int, int] = field(default_factory=lambda: {})

    def as_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests,
            "forwarded": self.forwarded,
            "injected_errors": self.injected_errors,
            "delayed": self.delayed,
            "lost_responses": self.lost_responses,
            "upstream_down": self.upstream_down,
            "errors_by_status": dict(sorted(self.errors_by_status.items())),
        }


class FaultyProxy:
    """Forward `http://127.0.0.1:port/...` to `upstream`, injecting 5xx answers, delays and lost responses."""

    def __init__(
        self,
        upstream: str,
        *,
        seed: int,
        error_rate: float = 0.05,
        delay_rate: float = 0.1,
        max_delay: float = 0.3,
        lost_response_rate: float = 0.0,
        port: int = 0,
        spare_paths: tuple[str, ...] = ("/v1/agl/health",),
    ) -> None:
        for name, rate in (
            ("error_rate", error_rate),
            ("delay_rate", delay_rate),
            ("lost_response_rate", lost_response_rate),
        ):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {rate!r}")
        if error_rate + delay_rate + lost_response_rate > 1.0:
            raise ValueError("error_rate + delay_rate + lost_response_rate must be <= 1")
        if max_delay < 0:
            raise ValueError(f"max_delay must be >= 0, got {max_delay!r}")
        self.upstream = upstream.rstrip("/")
        self.error_rate = error_rate
        self.delay_rate = delay_rate
        self.max_delay = max_delay
        self.lost_response_rate = lost_response_rate
        self.spare_paths = spare_paths
        self.stats = FaultStats()
        self._rng = random.Random(seed)
        self._requested_port = port
        self._port: Optional[int] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._runner: Optional[web.AppRunner] = None
        self._session: Optional[aiohttp.ClientSession] = None
        self._ready = threading.Event()
        self._startup_error: Optional[BaseException] = None

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("the proxy is not started")
        return f"http://127.0.0.1:{self._port}"

    # ---- lifecycle ----

    def start(self, timeout: float = 10.0) -> FaultyProxy:
        if self._thread is not None:
            raise RuntimeError("the proxy is already started")
        self._thread = threading.Thread(target=self._serve_forever, name="faulty-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"the proxy did not start within {timeout}s")
        if self._startup_error is not None:
            raise RuntimeError(f"the proxy failed to start: {self._startup_error!r}") from self._startup_error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            asyncio.run_coroutine_threadsafe(self._cleanup(), loop).result(timeout)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        self._thread = None

    def __enter__(self) -> FaultyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve_forever(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._startup())
        except BaseException as exc:  # reported to start() in the caller's thread
            self._startup_error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _startup(self) -> None:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self._requested_port)
        await site.start()
        server = site._server  # pyright: ignore[reportPrivateUsage]
        sockets = getattr(server, "sockets", None) or []
        self._port = int(sockets[0].getsockname()[1])
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300), auto_decompress=False)

    async def _cleanup(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- one request ----

    def _draw(self, path: str) -> tuple[str, float]:
        """The fate of one request: ("error", status) / ("delay", seconds) / ("lose", 0) / ("pass", 0)."""
        if path in self.spare_paths:
            return "pass", 0.0
        roll = self._rng.random()
        if roll < self.error_rate:
            return "error", float(self._rng.choice(_INJECTED_STATUSES))
        roll -= self.error_rate
        if roll < self.delay_rate:
            return "delay", self._rng.uniform(0.0, self.max_delay)
        roll -= self.delay_rate
        if roll < self.lost_response_rate:
            return "lose", 0.0
        return "pass", 0.0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.stats.requests += 1
        fate, value = self._draw(request.path)
        if fate == "error":
            status = int(value)
            self.stats.injected_errors += 1
            self.stats.errors_by_status[status] = self.stats.errors_by_status.get(status, 0) + 1
            return web.json_response({"detail": f"injected fault: HTTP {status}"}, status=status)
        if fate == "delay":
            self.stats.delayed += 1
            await asyncio.sleep(value)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED_HEADERS}
        assert self._session is not None
        try:
            async with self._session.request(
                request.method, self.upstream + request.rel_url.raw_path_qs, data=body, headers=headers
            ) as upstream:
                payload = await upstream.read()
                status = upstream.status
                answer_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _DROPPED_HEADERS}
        except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
            self.stats.upstream_down += 1
            return web.json_response({"detail": f"upstream unreachable: {exc!r}"}, status=502)
        self.stats.forwarded += 1
        if fate == "lose":
            self.stats.lost_responses += 1
            return web.json_response({"detail": "injected fault: the answer was lost"}, status=502)
        return web.Response(body=payload, status=status, headers=answer_headers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("upstream", help="the server to forward to, e.g. http://127.0.0.1:4747")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--error-rate", type=float, default=0.05)
    parser.add_argument("--delay-rate", type=float, default=0.1)
    parser.add_argument("--max-delay", type=float, default=0.3)
    parser.add_argument("--lost-response-rate", type=float, default=0.0)
    args = parser.parse_args()
    proxy = FaultyProxy(
        args.upstream,
        seed=args.seed,
        error_rate=args.error_rate,
        delay_rate=args.delay_rate,
        max_delay=args.max_delay,
        lost_response_rate=args.lost_response_rate,
        port=args.port,
    ).start()
    print(f"forwarding {proxy.url} -> {proxy.upstream}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
        print(proxy.stats.as_dict(), flush=True)


if __name__ == "__main__":
    main()
