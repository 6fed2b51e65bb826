"""Slow clients are cut off on every server we start (PythonServerLauncher): headers and bodies must arrive in time.

Before: uvicorn waited forever for a request that trickled in; 32 such connections held a store server for
as long as the clients liked (40 s in the red-team run), before auth. Raw sockets on 127.0.0.1; every wait
is bounded by a socket timeout far above the server's limits (no timed assertions).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentlightning.web.launcher import PythonServerLauncher, PythonServerLauncherArgs

CLIENT_WAIT = 20.0  # how long a test waits for the server to act: far longer than the limits below
seen_disconnects: list[str] = []


async def echo(request: Request) -> Response:
    body = b""
    async for piece in request.stream():  # raises ClientDisconnect when the server cuts a slow body off
        body += piece
    return JSONResponse({"size": len(body)})


async def slow_handler(_request: Request) -> Response:
    await asyncio.sleep(1.2)  # longer than every limit: a request that is in is never timed
    return JSONResponse({"ok": True})


async def health(_request: Request) -> Response:
    return JSONResponse({"status": "ok"})


APP = Starlette(routes=[Route("/echo", echo, methods=["POST"]), Route("/slow", slow_handler), Route("/health", health)])


@pytest.fixture
async def port() -> AsyncIterator[int]:
    args = PythonServerLauncherArgs(
        launch_mode="thread", healthcheck_url="/health", header_timeout=0.3, body_timeout=0.3, body_deadline=1.0
    )
    launcher = PythonServerLauncher(APP, args)
    await launcher.start()
    assert launcher.port is not None
    yield launcher.port
    await launcher.stop()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_WAIT)
    sock.settimeout(CLIENT_WAIT)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (socket.timeout if it never does)."""
    received = b""
    while True:
        piece = sock.recv(65536)
        if not piece:
            return received
        received += piece


def _read_response(sock: socket.socket) -> bytes:
    """One complete answer (headers and a Content-Length body) of a keep-alive connection."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_headers_that_trickle_in_are_answered_408_and_closed(port: int) -> None:
    sock = _connect(port)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
    assert _read_until_closed(sock).startswith(b"HTTP/1.1 408")
    sock.close()


def test_a_body_that_stops_arriving_is_cut_off(port: int) -> None:
    sock = _connect(port)
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
    answer = _read_until_closed(sock)
    assert b"200 OK" not in answer  # the handler never got a complete body
    sock.close()


def test_a_body_trickling_past_its_deadline_is_cut_off(port: int) -> None:
    sock = _connect(port)
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n")
    closed = False
    for _ in range(40):  # a byte every 0.15 s: never idle for body_timeout, but past body_deadline
        try:
            sock.sendall(b"x")
        except OSError:
            closed = True
            break
        time.sleep(0.15)
    if not closed:
        sock.settimeout(CLIENT_WAIT)
        assert b"200 OK" not in _read_until_closed(sock)
    sock.close()


def test_prompt_requests_keep_alive_and_slow_handlers_are_never_cut(port: int) -> None:
    sock = _connect(port)
    sock.sendall(b"GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    first = _read_response(sock)
    assert first.startswith(b"HTTP/1.1 200") and b'"ok":true' in first
    time.sleep(0.5)  # idle between two requests of a keep-alive connection: longer than header_timeout
    body = b"y" * 5000
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    second = _read_response(sock)
    assert second.startswith(b"HTTP/1.1 200") and b'"size":5000' in second
    sock.close()


@pytest.fixture
async def rate_port() -> AsyncIterator[int]:
    """A server whose only short limit is the body rate: pauses of 30 s and bodies of 300 s are allowed."""
    args = PythonServerLauncherArgs(launch_mode="thread", healthcheck_url="/health", body_grace=2.0)
    launcher = PythonServerLauncher(APP, args)
    await launcher.start()
    assert launcher.port is not None
    yield launcher.port
    await launcher.stop()


def _trickle(sock: socket.socket, count: int, gap: float) -> None:
    for _ in range(count):
        try:
            sock.sendall(b"x")
        except OSError:
            return
        time.sleep(gap)


def test_a_body_trickled_a_byte_at_a_time_is_answered_408_long_before_the_body_deadline(rate_port: int) -> None:
    """Before: a byte every 2 s held the connection for the whole 300 s `body_deadline`, and the cut said nothing."""
    sock = _connect(rate_port)
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n")
    _trickle(sock, 60, 0.1)  # 10 bytes/s: never a pause of body_timeout, far below body_min_rate
    assert _read_until_closed(sock).startswith(b"HTTP/1.1 408")
    sock.close()


def test_a_big_body_at_a_fair_rate_is_not_cut(rate_port: int) -> None:
    sock = _connect(rate_port)
    body = b"z" * (4 * 1024 * 1024)
    sock.sendall(b"POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % len(body))
    for start in range(0, len(body), 256 * 1024):
        sock.sendall(body[start : start + 256 * 1024])
    answer = _read_response(sock)
    assert answer.startswith(b"HTTP/1.1 200") and b'"size":4194304' in answer
    sock.close()


_LOW_FD_SERVER = """
import asyncio, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (96, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from agentlightning.web.launcher import PythonServerLauncher, PythonServerLauncherArgs

async def ok(request):
    await request.body()
    return JSONResponse({"ok": True})

async def main():
    # Generous limits: only the fair sharing of descriptors can let prompt requests in.
    args = PythonServerLauncherArgs(launch_mode="asyncio", healthcheck_url="/ok", header_timeout=120,
                                    body_timeout=120, body_grace=120)
    launcher = PythonServerLauncher(Starlette(routes=[Route("/ok", ok, methods=["GET", "POST"])]), args)
    await launcher.start()
    print(launcher.port, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_slow_clients_cannot_starve_prompt_ones_under_a_low_descriptor_limit() -> None:
    """Before: 120 slow connections on a server limited to 96 descriptors made every prompt request time out."""
    import os
    import subprocess
    import sys

    import httpx

    server = subprocess.Popen(
        [sys.executable, "-c", _LOW_FD_SERVER], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    slow: list[socket.socket] = []
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        for _ in range(120):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2.0)
                sock.sendall(b"POST /ok HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\nx")
                slow.append(sock)
            except OSError:
                pass
        for _ in range(5):
            answer = httpx.post(f"http://127.0.0.1:{port}/ok", content=b"{}", timeout=CLIENT_WAIT)
            assert answer.status_code == 200
    finally:
        for sock in slow:
            sock.close()
        server.kill()
        server.wait(timeout=30)
