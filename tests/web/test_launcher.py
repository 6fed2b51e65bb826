"""PythonServerLauncher: serve a tiny app in each launch mode on a free port, fail loudly when unhealthy."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentlightning.web.launcher import PortInUseError, PythonServerLauncher, PythonServerLauncherArgs


async def whoami(_request: Request) -> Response:
    return JSONResponse({"pid": os.getpid()})


async def broken_health(_request: Request) -> Response:
    return JSONResponse({"status": "sick"}, status_code=500)


APP = Starlette(routes=[Route("/whoami", whoami), Route("/sick", broken_health)])


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.mark.parametrize("mode", ["thread", "asyncio", "mp"])
async def test_each_launch_mode_serves_on_a_free_port(mode: str) -> None:
    launcher = PythonServerLauncher(APP, PythonServerLauncherArgs(launch_mode=mode, healthcheck_url="/whoami"))  # type: ignore[arg-type]
    await launcher.start()
    port = launcher.port
    assert port is not None and launcher.access_endpoint == f"http://127.0.0.1:{port}"
    assert launcher.is_running()
    try:
        async with httpx.AsyncClient(base_url=launcher.access_endpoint) as http:
            pid = (await http.get("/whoami")).json()["pid"]
        assert (pid != os.getpid()) == (mode == "mp")
        if mode == "thread":
            assert launcher.loop is not None and launcher.loop is not asyncio.get_running_loop()
    finally:
        await launcher.stop()
    assert not launcher.is_running()
    assert port_is_free(port)
    await launcher.stop()  # idempotent


async def test_mp_with_several_workers_shares_one_socket() -> None:
    args = PythonServerLauncherArgs(launch_mode="mp", n_workers=2, healthcheck_url="/whoami")
    launcher = PythonServerLauncher(APP, args)
    await launcher.start()
    try:
        assert len(launcher._processes) == 2  # pyright: ignore[reportPrivateUsage]
        async with httpx.AsyncClient(base_url=launcher.access_endpoint) as http:
            assert (await http.get("/whoami")).status_code == 200
    finally:
        await launcher.stop()


async def test_unhealthy_server_is_stopped_and_reported() -> None:
    args = PythonServerLauncherArgs(launch_mode="thread", healthcheck_url="/sick", startup_timeout=0.3)
    launcher = PythonServerLauncher(APP, args)
    with pytest.raises(RuntimeError, match="HTTP 500"):
        await launcher.start()
    assert not launcher.is_running()


async def test_startup_failure_surfaces() -> None:
    @asynccontextmanager
    async def failing_lifespan(_app: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("cannot open the database")
        yield

    app = Starlette(lifespan=failing_lifespan)
    for mode in ("thread", "asyncio"):
        launcher = PythonServerLauncher(app, PythonServerLauncherArgs(launch_mode=mode, startup_timeout=30))  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="failed to start"):
            await launcher.start()


async def test_busy_port_names_the_fix() -> None:
    first = PythonServerLauncher(APP, PythonServerLauncherArgs(launch_mode="asyncio"))
    await first.start()
    try:
        assert first.port is not None
        second = PythonServerLauncher(APP, PythonServerLauncherArgs(launch_mode="asyncio", port=first.port))
        with pytest.raises(OSError, match="port=0") as caught:
            await second.start()
        # v0.3 raises RuntimeError for a busy port: catch sites written for either type work.
        assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, PortInUseError)
        assert caught.value.errno is not None
        with pytest.raises(RuntimeError, match="cannot listen"):
            await second.start()
        assert not second.is_running()
    finally:
        await first.stop()


async def test_health_url_is_the_absolute_probe_url() -> None:
    launcher = PythonServerLauncher(APP, PythonServerLauncherArgs(launch_mode="asyncio", healthcheck_url="whoami"))
    await launcher.start()
    try:
        health_url = launcher.health_url
        assert health_url is not None and health_url == f"{launcher.access_endpoint}/whoami"
        async with httpx.AsyncClient() as client:
            assert (await client.get(health_url)).json() == {"pid": os.getpid()}
    finally:
        await launcher.stop()
    assert PythonServerLauncher(APP, PythonServerLauncherArgs(port=8123)).health_url is None
    absolute = PythonServerLauncherArgs(port=8123, healthcheck_url="http://127.0.0.1:9/health")
    assert PythonServerLauncher(APP, absolute).health_url == "http://127.0.0.1:9/health"


async def test_run_forever_ends_when_cancelled() -> None:
    launcher = PythonServerLauncher(APP, PythonServerLauncherArgs(launch_mode="thread"))
    serving = asyncio.create_task(launcher.run_forever())
    while not launcher.is_running():
        await asyncio.sleep(0.01)
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving
    assert not launcher.is_running()


def test_argument_checks() -> None:
    with pytest.raises(ValueError, match="launch_mode"):
        PythonServerLauncherArgs(launch_mode="fork")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mp"):
        PythonServerLauncherArgs(launch_mode="thread", n_workers=2)
    with pytest.raises(ValueError, match="port"):
        PythonServerLauncherArgs(port=70000)
    with pytest.raises(RuntimeError, match="start"):
        _ = PythonServerLauncher(APP).access_endpoint
    assert PythonServerLauncher(APP, PythonServerLauncherArgs(host="0.0.0.0")).access_endpoint_for(1) == (
        "http://127.0.0.1:1"
    )
