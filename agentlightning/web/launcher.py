"""Run an ASGI app with uvicorn in a background thread, in the current event loop, or in processes.

Shared by every server we ship (store, LLM proxy, gateway, `agl serve`). The launcher binds the listening socket itself before
starting uvicorn, so `port=0`/`None` yields a free port with no race, and the bound port is known as
soon as `start()` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

import uvicorn

from .slow_clients import (
    DEFAULT_BODY_DEADLINE,
    DEFAULT_BODY_GRACE,
    DEFAULT_BODY_MIN_RATE,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    guarded_config,
)

__all__ = ["LaunchMode", "PortInUseError", "PythonServerLauncherArgs", "PythonServerLauncher", "pick_free_port"]

logger = logging.getLogger(__name__)

LaunchMode = Literal["asyncio", "thread", "mp"]
_LAUNCH_MODES: tuple[str, ...] = ("asyncio", "thread", "mp")


@dataclass
class PythonServerLauncherArgs:
    """How and where to serve an app.

    `port` None or 0 picks a free port. `host` None binds 127.0.0.1. `access_host` is the host clients use
    (defaults to `host`, or 127.0.0.1 when binding every interface). `healthcheck_url` is a path (or
    full URL) that must answer 2xx before `start()` returns; without it any HTTP answer counts.
    `n_workers > 1` needs `launch_mode="mp"` (pre-forked processes sharing one socket).
    """

    port: Optional[int] = None
    host: Optional[str] = None
    access_host: Optional[str] = None
    launch_mode: LaunchMode = "asyncio"
    n_workers: int = 1
    healthcheck_url: Optional[str] = None
    log_level: int = logging.INFO
    access_log: bool = False
    startup_timeout: float = 60.0
    kill_unhealthy_server: bool = True
    thread_join_timeout: float = 10.0
    process_join_timeout: float = 10.0
    graceful_shutdown_timeout: float = 5.0
    keep_alive_timeout: int = 75
    # Slow clients (see `web.slow_clients`): a request's headers must arrive within `header_timeout` s of
    # its first byte; its body may pause `body_timeout` s at most, must average `body_min_rate` bytes/s
    # after `body_grace` s, and must be in `body_deadline` s after the headers.
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    body_deadline: float = DEFAULT_BODY_DEADLINE
    body_grace: float = DEFAULT_BODY_GRACE
    body_min_rate: float = DEFAULT_BODY_MIN_RATE

    def __post_init__(self) -> None:
        if self.launch_mode not in _LAUNCH_MODES:
            raise ValueError(f"launch_mode must be one of {', '.join(_LAUNCH_MODES)}, got {self.launch_mode!r}")
        if self.n_workers < 1:
            raise ValueError(f"n_workers must be >= 1, got {self.n_workers}")
        if self.n_workers > 1 and self.launch_mode != "mp":
            raise ValueError(f"n_workers={self.n_workers} needs launch_mode='mp' (got {self.launch_mode!r})")
        for name in ("header_timeout", "body_timeout", "body_deadline", "body_grace", "body_min_rate"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be a positive number, got {getattr(self, name)!r}")
        if self.port is not None and not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535 (0 = any free port), got {self.port}")


def pick_free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago. Prefer binding port 0 yourself: this one can be taken meanwhile."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class PortInUseError(OSError, RuntimeError):
    """The server cannot listen on its port. An `OSError` (with `errno`) and, as in v0.3, a `RuntimeError`."""

    FIX = "pass port=0"
    """The advice in the message, worded for Python callers; `for_cli` words it for a command line."""

    def for_cli(self, flag: str = "--port 0") -> str:
        """The message with the command line's flag in the advice (`agl store: ... pass --port 0 ...`)."""
        return str(self).replace(self.FIX, f"pass {flag}")


def _bind_socket(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, socktype, proto, _, address = infos[0]
    sock = socket.socket(family, socktype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise PortInUseError(
            exc.errno,
            f"cannot listen on {host}:{port} ({exc.strerror}); stop whatever uses that port or "
            f"{PortInUseError.FIX} to pick a free one",
        ) from exc
    sock.setblocking(False)
    return sock


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to its host and stops as soon as it is asked to."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._wake: Optional[asyncio.Event] = None
        self._wake_loop: Optional[asyncio.AbstractEventLoop] = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def main_loop(self) -> None:
        # uvicorn's loop sleeps 0.1 s between ticks; waiting on an event lets `request_exit` cut that short.
        self._wake_loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)
            should_exit = await self.on_tick(counter)

    def request_exit(self) -> None:
        """Ask the server to shut down (from any thread)."""
        self.should_exit = True
        loop, wake = self._wake_loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)


def _serve_in_process(app: Any, config: dict[str, Any], sock: socket.socket) -> None:
    """Entry point of an `mp` worker process: serve until SIGTERM/SIGINT (handled by uvicorn)."""
    server = uvicorn.Server(guarded_config(app, **config))
    asyncio.run(server.serve(sockets=[sock]))


async def _serve_guarded(server: uvicorn.Server, sock: socket.socket) -> None:
    """Serve in the caller's loop; uvicorn's SystemExit on startup failure must not end the caller's program."""
    try:
        await server.serve(sockets=[sock])
    except SystemExit as exc:
        raise RuntimeError(f"uvicorn exited with code {exc.code} (see the log above)") from None


def _endpoint(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class PythonServerLauncher:
    """Start and stop one ASGI app according to `PythonServerLauncherArgs`.

    `launch_mode="thread"` runs uvicorn on its own event loop in a daemon thread (`loop` exposes it);
    `"asyncio"` runs it as a task of the caller's loop; `"mp"` forks `n_workers` processes sharing the
    socket (the app must be usable after fork, or be an import string).
    """

    def __init__(self, app: Union[Any, str], args: Optional[PythonServerLauncherArgs] = None) -> None:
        self.app = app
        self.args = args or PythonServerLauncherArgs()
        self._host = self.args.host or "127.0.0.1"
        self._port: Optional[int] = self.args.port or None
        self._server: Optional[uvicorn.Server] = None
        self._thread: Optional[threading.Thread] = None
        self._thread_error: Optional[BaseException] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._task: Optional[asyncio.Task[None]] = None
        self._processes: list[Any] = []
        self._running = False

    # ---- addresses ----

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> Optional[int]:
        """The bound port (known after `start()` when a free port was requested)."""
        return self._port

    @property
    def access_host(self) -> str:
        if self.args.access_host:
            return self.args.access_host
        if self._host in ("0.0.0.0", "::", ""):
            return "127.0.0.1"
        return self._host

    @property
    def access_endpoint(self) -> str:
        """Base URL clients use, e.g. `http://127.0.0.1:4747`."""
        if self._port is None:
            raise RuntimeError("the server has no port yet; call start() first (a free port is picked then)")
        return _endpoint(self.access_host, self._port)

    @property
    def health_url(self) -> Optional[str]:
        """The absolute URL probed before `start()` returns: `healthcheck_url` on this server, or None without one."""
        url = self.args.healthcheck_url
        if not url:
            return None
        if url.startswith(("http://", "https://")):
            return url
        return self.access_endpoint + "/" + url.lstrip("/")

    def access_endpoint_for(self, port: int) -> str:
        """The URL clients would use if the server listened on `port`."""
        return _endpoint(self.access_host, port)

    @property
    def loop(self) -> Optional[asyncio.AbstractEventLoop]:
        """The event loop serving requests (thread and asyncio modes), None when not running or in `mp`."""
        return self._loop

    def is_running(self) -> bool:
        if not self._running:
            return False
        if self.args.launch_mode == "thread":
            return self._thread is not None and self._thread.is_alive()
        if self.args.launch_mode == "asyncio":
            return self._task is not None and not self._task.done()
        return any(p.is_alive() for p in self._processes)

    # ---- lifecycle ----

    def _uvicorn_config(self) -> dict[str, Any]:
        return {
            "host": self._host,
            "port": self._port or 0,
            "log_level": self.args.log_level,
            "access_log": self.args.access_log,
            "log_config": None,
            "lifespan": "auto",
            "timeout_graceful_shutdown": self.args.graceful_shutdown_timeout,
            "timeout_keep_alive": self.args.keep_alive_timeout,
            "header_timeout": self.args.header_timeout,
            "body_timeout": self.args.body_timeout,
            "body_deadline": self.args.body_deadline,
            "body_grace": self.args.body_grace,
            "body_min_rate": self.args.body_min_rate,
        }

    async def start(self) -> None:
        """Bind, start serving and wait until healthy (raises RuntimeError after `startup_timeout`)."""
        if self._running:
            raise RuntimeError(f"server already running at {self.access_endpoint}; stop() it first")
        sock = _bind_socket(self._host, self.args.port or 0)
        self._port = sock.getsockname()[1]
        self._thread_error = None
        mode = self.args.launch_mode
        try:
            if mode == "thread":
                self._start_thread(sock)
            elif mode == "asyncio":
                self._start_task(sock)
            else:
                self._start_processes(sock)
        except BaseException:
            sock.close()
            raise
        self._running = True
        try:
            await self._wait_until_serving()
        except BaseException:
            if self.args.kill_unhealthy_server or not self.is_running():
                await self.stop()
                raise
            logger.warning("server at %s did not become healthy; leaving it running", self.access_endpoint)
        logger.info("serving at %s (launch mode %s)", self.access_endpoint, mode)

    def _start_thread(self, sock: socket.socket) -> None:
        config = guarded_config(self.app, **self._uvicorn_config())
        server = _EmbeddedServer(config)
        self._server = server
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(server.serve(sockets=[sock]))
            except BaseException as exc:  # uvicorn reports startup failures with SystemExit
                self._thread_error = exc
                logger.error("server thread stopped with %r", exc)
            finally:
                try:
                    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                    for task in pending:
                        task.cancel()
                    if pending:
                        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                    loop.run_until_complete(loop.shutdown_asyncgens())
                finally:
                    loop.close()

        self._thread = threading.Thread(target=run, name=f"agl-server-{self._port}", daemon=True)
        self._thread.start()

    def _start_task(self, sock: socket.socket) -> None:
        config = guarded_config(self.app, **self._uvicorn_config())
        server = _EmbeddedServer(config)
        self._server = server
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(_serve_guarded(server, sock), name=f"agl-server-{self._port}")

    def _start_processes(self, sock: socket.socket) -> None:
        if isinstance(self.app, str) or os.name != "posix":
            if not isinstance(self.app, str):
                raise ValueError("launch_mode='mp' without fork needs the app as an import string 'module:attr'")
            ctx = multiprocessing.get_context("spawn")
        else:
            ctx = multiprocessing.get_context("fork")
        config = self._uvicorn_config()
        try:
            for index in range(self.args.n_workers):
                process = ctx.Process(
                    target=_serve_in_process,
                    args=(self.app, config, sock),
                    name=f"agl-server-{self._port}-{index}",
                    daemon=True,
                )
                process.start()
                self._processes.append(process)
        finally:
            sock.close()  # the workers hold their own copies

    def _startup_failed(self) -> Optional[str]:
        mode = self.args.launch_mode
        if mode == "thread" and self._thread is not None and not self._thread.is_alive():
            return f"server thread exited during startup ({self._thread_error!r})"
        if mode == "asyncio" and self._task is not None and self._task.done():
            exc = None if self._task.cancelled() else self._task.exception()
            return f"server task exited during startup ({exc!r})"
        if mode == "mp" and self._processes and not any(p.is_alive() for p in self._processes):
            codes = [p.exitcode for p in self._processes]
            return f"server processes exited during startup (exit codes {codes})"
        return None

    async def _wait_until_serving(self) -> None:
        import aiohttp

        deadline = time.monotonic() + self.args.startup_timeout
        health_url = self.health_url
        probe_url, need_ok = (self.access_endpoint + "/", False) if health_url is None else (health_url, True)
        last_problem = "no answer yet"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0)) as session:
            delay = 0.005
            while True:
                failure = self._startup_failed()
                if failure is not None:
                    raise RuntimeError(f"server at {self.access_endpoint} failed to start: {failure}")
                if self._server is None or self._server.started:
                    try:
                        async with session.get(probe_url) as response:
                            if not need_ok or response.status < 300:
                                return
                            last_problem = f"{probe_url} answered HTTP {response.status}"
                    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                        last_problem = f"{probe_url}: {exc!r}"
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"server at {self.access_endpoint} not healthy after {self.args.startup_timeout}s "
                        f"({last_problem}); raise startup_timeout or check the server logs"
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.2)

    async def stop(self) -> None:
        """Stop serving and wait for the thread/task/processes to finish. Idempotent."""
        if not self._running:
            return
        self._running = False
        mode = self.args.launch_mode
        try:
            if mode == "thread":
                await self._stop_thread()
            elif mode == "asyncio":
                await self._stop_task()
            else:
                await self._stop_processes()
        finally:
            self._server = None
            self._loop = None
            self._task = None
            self._thread = None
            self._processes = []

    def _request_exit(self) -> None:
        if isinstance(self._server, _EmbeddedServer):
            self._server.request_exit()
        elif self._server is not None:
            self._server.should_exit = True

    async def _stop_thread(self) -> None:
        self._request_exit()
        thread = self._thread
        if thread is None:
            return
        await asyncio.to_thread(thread.join, self.args.thread_join_timeout)
        if thread.is_alive():
            if self._server is not None:
                self._server.force_exit = True
            await asyncio.to_thread(thread.join, self.args.thread_join_timeout)
            if thread.is_alive():
                logger.warning("server thread %s did not stop within %ss", thread.name, self.args.thread_join_timeout)

    async def _stop_task(self) -> None:
        task = self._task
        self._request_exit()
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=self.args.thread_join_timeout)
        except asyncio.TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        except (Exception, SystemExit) as exc:
            logger.debug("server task ended with %r", exc)

    async def _stop_processes(self) -> None:
        for process in self._processes:
            if process.is_alive():
                process.terminate()
        for process in self._processes:
            await asyncio.to_thread(process.join, self.args.process_join_timeout)
            if process.is_alive():
                logger.warning("server process %s ignored SIGTERM; killing it", process.pid)
                process.kill()
                await asyncio.to_thread(process.join, self.args.process_join_timeout)

    async def run_forever(self) -> None:
        """Start (if needed) and serve until SIGINT/SIGTERM, cancellation or the server exiting; then stop."""
        if not self._running:
            await self.start()
        stop_requested = asyncio.Event()
        loop = asyncio.get_running_loop()
        installed: list[int] = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, stop_requested.set)
                    installed.append(sig)
        try:
            while self.is_running() and not stop_requested.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop_requested.wait(), timeout=0.5)
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            await self.stop()
