"""ClientServerExecutionStrategy: the algorithm serves the store over HTTP; runners are processes talking to it."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, Literal, Optional

from agentlightning.env_var import LightningEnvVar, resolve_bool_env_var, resolve_int_env_var, resolve_str_env_var
from agentlightning.store.base import LightningStore

from ._supervise import run_until_stopped
from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle
from .errors import RunError
from .events import ExecutionEvent, MultiprocessingEvent

if TYPE_CHECKING:
    from agentlightning.store_http.client import LightningStoreClient
    from agentlightning.store_http.server import LightningStoreServer

__all__ = ["ClientServerExecutionStrategy"]

logger = logging.getLogger(__name__)

Role = Literal["algorithm", "runner", "both"]
MainProcessRole = Literal["algorithm", "runner"]

_ROLES = ("algorithm", "runner", "both")
_WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "")
_MONITOR_INTERVAL = 0.1
INTERRUPT_STEP_SECONDS = 1.0
"""After Ctrl+C, each shutdown step (stop event, SIGINT, SIGTERM) waits this long before the next one."""


class ClientServerExecutionStrategy(ExecutionStrategy):
    """Algorithm + `LightningStoreServer` in one process, runners in others using `LightningStoreClient`.

    Roles (argument, else `AGL_CURRENT_ROLE`, else "both"):
    - "algorithm": serve the store on `server_host:server_port` and run the algorithm here.
    - "runner": connect to `http://server_host:server_port` and run `n_runners` runners (in this process
      when there is one, else in child processes).
    - "both": spawn the runner processes, then run algorithm + server here (or, with
      `main_process="runner"`, the algorithm in a child process and the single runner here).

    Shutdown, once the algorithm ends, something fails or Ctrl+C arrives: (1) set the shared stop event
    and wait `graceful_timeout`; (2) SIGINT the children still alive; (3) SIGTERM; (4) SIGKILL, each later
    step waiting `terminate_timeout`. A child whose exit code is not in `allowed_exit_codes` makes
    `execute` raise `RunError` (a RuntimeError); a runner process dying abnormally is logged at once. After
    Ctrl+C the steps wait `INTERRUPT_STEP_SECONDS` each, so the run stops within a few seconds. With `managed_store=False` (or
    `AGL_MANAGED_STORE=0`) the store is used as given on both sides: no server is started and runners do
    not create clients (the Trainer does this for a `LightningStoreClient`, e.g. `AGL_STORE_URL`).

    Runner processes started here learn the server's port once it listens, so `server_port=0` (a free
    port) works. A runner waiting for a server that never answers gives up with `RunError` after the
    store client's retry budget (60 s, env `AGL_STORE_RETRY_BUDGET`).
    """

    alias = "cs"

    def __init__(
        self,
        role: Optional[Role] = None,
        server_host: Optional[str] = None,
        server_port: Optional[int] = None,
        n_runners: int = 1,
        graceful_timeout: float = 10.0,
        terminate_timeout: float = 10.0,
        main_process: MainProcessRole = "algorithm",
        managed_store: Optional[bool] = None,
        allowed_exit_codes: Sequence[int] = (0, -15),
    ) -> None:
        resolved_role = resolve_str_env_var(LightningEnvVar.AGL_CURRENT_ROLE, role, fallback="both").lower()
        if resolved_role not in _ROLES:
            raise ValueError(
                f"role {resolved_role!r} (from argument or AGL_CURRENT_ROLE) is invalid; use 'algorithm', 'runner' or 'both'"
            )
        if n_runners < 1:
            raise ValueError(f"n_runners must be >= 1, got {n_runners}")
        if main_process not in ("algorithm", "runner"):
            raise ValueError(f"main_process must be 'algorithm' or 'runner', got {main_process!r}")
        if main_process == "runner" and (resolved_role != "both" or n_runners != 1):
            raise ValueError(
                f"main_process='runner' needs role='both' and n_runners=1 (got role={resolved_role!r}, "
                f"n_runners={n_runners}); it exists to debug a single runner in the main process"
            )
        if graceful_timeout < 0 or terminate_timeout < 0:
            raise ValueError("graceful_timeout and terminate_timeout must be >= 0")
        self.role: Role = resolved_role  # type: ignore[assignment]
        self.server_host: str = resolve_str_env_var(LightningEnvVar.AGL_SERVER_HOST, server_host, fallback="localhost")
        self.server_port: int = resolve_int_env_var(LightningEnvVar.AGL_SERVER_PORT, server_port, fallback=4747)
        self.n_runners = n_runners
        self.graceful_timeout = graceful_timeout
        self.terminate_timeout = terminate_timeout
        self.main_process: MainProcessRole = main_process
        self.managed_store: bool = resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE, managed_store, fallback=True)
        self.allowed_exit_codes: tuple[int, ...] = tuple(allowed_exit_codes)
        # Set per run when this process spawns runners: the port the server listens on, once it does.
        self._shared_port: Optional[Any] = None

    def __repr__(self) -> str:
        return (
            f"ClientServerExecutionStrategy(role={self.role!r}, server={self.server_host}:{self.server_port}, "
            f"n_runners={self.n_runners}, main_process={self.main_process!r}, managed_store={self.managed_store})"
        )

    @property
    def endpoint(self) -> str:
        """The URL runners use to reach the store server."""
        return self._endpoint_for(self.server_port)

    def _endpoint_for(self, port: int) -> str:
        host = self.server_host
        if host in _WILDCARD_HOSTS:
            host = "127.0.0.1"
        elif ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{port}"

    # ---- entry point ----

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        if not self.managed_store and self.role == "both" and not store.capabilities.get("zero_copy", False):
            # The runner processes forked here would each get a private copy of the store: nothing could run.
            raise RunError(
                f"AGL_MANAGED_STORE=0 (managed_store=False) serves nothing, and {type(store).__name__} is private "
                "to this process, so no runner could see its rollouts. To use a running store server, set "
                "AGL_STORE_URL=http://HOST:PORT (or Trainer(store='http://HOST:PORT')); otherwise drop "
                "AGL_MANAGED_STORE=0 to serve the store from here"
            )
        if self.role == "algorithm":
            self._execute_algorithm_role(algorithm, store)
        elif self.role == "runner":
            self._execute_runner_role(runner, store)
        elif self.main_process == "runner":
            self._execute_both_runner_on_main(algorithm, runner, store)
        else:
            self._execute_both_algorithm_on_main(algorithm, runner, store)

    # ---- the two sides, as coroutines ----

    async def _algorithm_side(
        self,
        algorithm: AlgorithmBundle,
        store: LightningStore,
        stop_event: ExecutionEvent,
        should_stop: Optional[Callable[[], bool]] = None,
        before_server_stop: Optional[Callable[[bool], None]] = None,
    ) -> None:
        """Serve the store (when managed) and run the algorithm until it ends or the stop event fires.

        `before_server_stop(interrupted)` (blocking, run in a worker thread) stops the local runners while
        the server is still up, so they can still report their last attempts.
        """
        server: Optional[LightningStoreServer] = None
        algorithm_store: LightningStore = store
        if self.managed_store:
            from agentlightning.dashboard import dashboard_router
            from agentlightning.store_http.server import LightningStoreServer

            server = LightningStoreServer(
                store, host=self.server_host, port=self.server_port, routers=[dashboard_router()]
            )
            algorithm_store = server
            try:
                await server.start()
            except OSError as exc:
                stop_event.set()
                if exc.errno != errno.EADDRINUSE:
                    raise
                raise await asyncio.to_thread(port_in_use_error, self.server_host, self.server_port) from None
            if self._shared_port is not None:
                self._shared_port.value = server.port or 0
            logger.info("Store server listening on %s", server.endpoint)
        monitor: Optional[asyncio.Task[None]] = None
        if should_stop is not None:
            monitor = asyncio.create_task(self._monitor(should_stop, stop_event))
        interrupted = False
        try:
            await run_until_stopped(
                algorithm(algorithm_store, stop_event),
                stop_event,
                graceful_delay=self.graceful_timeout,
                name="Algorithm",
            )
        except asyncio.CancelledError:  # asyncio.run turns Ctrl+C into cancelling this, its main task
            interrupted = True
            raise
        finally:
            stop_event.set()
            if monitor is not None:
                monitor.cancel()
                await asyncio.gather(monitor, return_exceptions=True)
            if before_server_stop is not None:
                await asyncio.to_thread(before_server_stop, interrupted)
            if server is not None:
                await server.stop()
            if not self.managed_store:
                await store.close_loop_resources()

    async def _monitor(self, should_stop: Callable[[], bool], stop_event: ExecutionEvent) -> None:
        while not stop_event.is_set():
            if should_stop():
                stop_event.set()
                return
            await asyncio.sleep(_MONITOR_INTERVAL)

    async def _runner_side(
        self, runner: RunnerBundle, store: Optional[LightningStore], worker_id: int, stop_event: ExecutionEvent
    ) -> None:
        """Run one runner bundle against a client of the server (or the given store when unmanaged)."""
        if self.managed_store or store is None:
            from agentlightning.store_http.client import LightningStoreClient

            endpoint = await self._server_endpoint(stop_event)
            if endpoint is None:
                return
            client = LightningStoreClient(endpoint)
            try:
                if not await _wait_for_server(client, stop_event, worker_id):
                    return
                await runner(client, worker_id, stop_event)
            finally:
                await client.close()
        else:
            try:
                await runner(store, worker_id, stop_event)
            finally:
                await store.close_loop_resources()

    async def _server_endpoint(self, stop_event: ExecutionEvent) -> Optional[str]:
        """The server's URL; a runner spawned here waits until the server listens (None if stopped first)."""
        shared = self._shared_port
        if shared is None:
            if self.server_port == 0:
                raise RunError(
                    "a runner-only process cannot use server port 0 (a free port is picked by the process that "
                    "serves the store); set AGL_SERVER_PORT to the port the algorithm's store listens on"
                )
            return self.endpoint
        while not stop_event.is_set():
            if shared.value:
                return self._endpoint_for(shared.value)
            await asyncio.sleep(_MONITOR_INTERVAL)
        return None

    # ---- roles ----

    def _execute_algorithm_role(self, algorithm: AlgorithmBundle, store: LightningStore) -> None:
        stop_event = MultiprocessingEvent(ctx=self._context())
        try:
            asyncio.run(self._algorithm_side(algorithm, store, stop_event))
        except KeyboardInterrupt:
            logger.warning("Interrupted; the algorithm and the store server stopped")
            raise

    def _execute_runner_role(self, runner: RunnerBundle, store: LightningStore) -> None:
        stop_event = MultiprocessingEvent(ctx=self._context())
        runner_store = None if self.managed_store else store
        if self.n_runners == 1:
            try:
                asyncio.run(self._runner_side(runner, runner_store, 0, stop_event))
            except KeyboardInterrupt:
                logger.warning("Interrupted; runner stopped")
                raise
            return
        processes = [self._spawn_runner(runner, runner_store, i, stop_event) for i in range(self.n_runners)]
        interrupted = False
        try:
            self._join_forever(processes)
        except KeyboardInterrupt:
            interrupted = True
            logger.warning("Interrupted; stopping %d runner processes", len(processes))
        finally:
            self._shutdown(processes, stop_event)
        if interrupted:
            raise KeyboardInterrupt
        self._check_exit_codes(processes)

    def _execute_both_algorithm_on_main(
        self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore
    ) -> None:
        stop_event = MultiprocessingEvent(ctx=self._context())
        runner_store = None if self.managed_store else store
        self._shared_port = self._context().Value("i", 0, lock=False)
        # Fork the runners before this process starts any thread (the server), so children start clean.
        processes = [self._spawn_runner(runner, runner_store, i, stop_event) for i in range(self.n_runners)]

        reported: set[str] = set()
        all_gone = False

        def runners_gone() -> bool:
            nonlocal all_gone
            for process in processes:
                if process.is_alive() or process.exitcode in self.allowed_exit_codes or process.name in reported:
                    continue
                reported.add(process.name)
                logger.error(
                    "%s; the store retries or fails a rollout it was running once that attempt was silent for "
                    "its RolloutConfig.unresponsive_seconds (300 s by default)",
                    _exits([process]),
                )
            if any(p.is_alive() for p in processes):
                return False
            logger.warning("All runner processes exited (%s); stopping the algorithm", _exits(processes))
            all_gone = True
            return True

        self._run_main_and_shutdown(
            lambda: asyncio.run(
                self._algorithm_side(
                    algorithm,
                    store,
                    stop_event,
                    should_stop=runners_gone,
                    before_server_stop=lambda interrupted: self._shutdown(processes, stop_event, interrupted),
                )
            ),
            "Algorithm",
            processes,
            stop_event,
            outlive_children=lambda: not all_gone,
        )

    def _execute_both_runner_on_main(
        self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore
    ) -> None:
        stop_event = MultiprocessingEvent(ctx=self._context())
        self._shared_port = self._context().Value("i", 0, lock=False)
        algorithm_process = self._context().Process(
            target=_algorithm_process_main,
            args=(self, algorithm, store, stop_event, os.getpid()),
            name="AgentLightning-Algorithm",
        )
        algorithm_process.start()
        runner_store = None if self.managed_store else store

        def run_runner_then_wait() -> None:
            asyncio.run(self._runner_side(runner, runner_store, 0, stop_event))
            # The runner ended on its own: the algorithm runs to completion.
            self._join_forever([algorithm_process])

        self._run_main_and_shutdown(run_runner_then_wait, "Runner-0", [algorithm_process], stop_event)

    # ---- process management ----

    def _run_main_and_shutdown(
        self,
        main: Callable[[], None],
        name: str,
        processes: list[BaseProcess],
        stop_event: ExecutionEvent,
        outlive_children: Callable[[], bool] = lambda: False,
    ) -> None:
        """Run `main` in this process, then stop the children with the escalation; raise what went wrong.

        When `main` finishes and `outlive_children()` says it finished on its own (the algorithm with the
        runners left), children a signal had already killed (SIGKILL, the OOM killer) do not fail the run:
        each was logged when it died, and the store retried or failed the attempt it held. A child that
        exited with an error code of its own still does.
        """
        error: Optional[BaseException] = None
        interrupted = False
        forgiven: list[BaseProcess] = []
        try:
            main()
            if outlive_children():
                forgiven = [
                    p
                    for p in processes
                    if p.exitcode is not None and p.exitcode < 0 and p.exitcode not in self.allowed_exit_codes
                ]
        except KeyboardInterrupt:
            interrupted = True
            alive = sum(p.is_alive() for p in processes)
            if alive:
                logger.info("Interrupted; stopping %d remaining child processes", alive)
        except RunError as exc:  # says what went wrong itself
            error = exc
        except BaseException as exc:
            logger.error("%s failed in the main process (%r); stopping the child processes", name, exc)
            error = exc
        finally:
            self._shutdown(processes, stop_event, interrupted)
        if interrupted:
            raise KeyboardInterrupt
        if error is not None:
            raise error
        if forgiven:
            logger.warning(
                "The run finished without %s (it died during the run; the store retried or failed its attempt)",
                _exits(forgiven),
            )
        self._check_exit_codes([p for p in processes if p not in forgiven])

    @staticmethod
    def _context() -> Any:
        # fork keeps unpicklable trainer components (stores with locks, tracers) usable in the children.
        if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
            return multiprocessing.get_context("fork")
        return multiprocessing.get_context()

    def _spawn_runner(
        self, runner: RunnerBundle, store: Optional[LightningStore], worker_id: int, stop_event: ExecutionEvent
    ) -> BaseProcess:
        process = self._context().Process(
            target=_runner_process_main,
            args=(self, runner, store, worker_id, stop_event, os.getpid()),
            name=f"AgentLightning-Runner-{worker_id}",
        )
        process.start()
        return process

    def _join_forever(self, processes: list[BaseProcess]) -> None:
        for process in processes:
            while process.is_alive():
                process.join(timeout=_MONITOR_INTERVAL)

    def _join_until(self, processes: list[BaseProcess], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for process in processes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            process.join(timeout=remaining)

    def _shutdown(self, processes: list[BaseProcess], stop_event: ExecutionEvent, interrupted: bool = False) -> None:
        """Stop the children: stop event, then SIGINT, SIGTERM and SIGKILL for the ones still alive.

        After Ctrl+C the children got SIGINT from the terminal already; each step then waits only
        `INTERRUPT_STEP_SECONDS`, and the escalation is expected, so it is not warned about.
        """
        stop_event.set()
        graceful = INTERRUPT_STEP_SECONDS if interrupted else self.graceful_timeout
        terminate = INTERRUPT_STEP_SECONDS if interrupted else self.terminate_timeout
        steps: list[tuple[str, float, Callable[[BaseProcess], None]]] = [
            ("stop event", graceful, lambda p: None),
            ("SIGINT", terminate, _send_sigint),
            ("SIGTERM", terminate, lambda p: p.terminate()),
            ("SIGKILL", terminate, lambda p: p.kill()),
        ]
        for step, wait_seconds, action in steps:
            alive = [p for p in processes if p.is_alive()]
            if not alive:
                return
            if step != "stop event":
                (logger.info if interrupted else logger.warning)(
                    "%d child processes still alive (%s); sending %s",
                    len(alive),
                    ", ".join(f"{p.name} pid={p.pid}" for p in alive),
                    step,
                )
            for process in alive:
                try:
                    action(process)
                except (ProcessLookupError, OSError):
                    continue
            try:
                self._join_until(alive, wait_seconds)
            except KeyboardInterrupt:
                logger.warning("Interrupted again during shutdown; escalating immediately")
        still_alive = [p.name for p in processes if p.is_alive()]
        if still_alive:
            logger.error("Child processes survived SIGKILL: %s", still_alive)

    def _check_exit_codes(self, processes: list[BaseProcess]) -> None:
        bad = [p for p in processes if p.exitcode not in self.allowed_exit_codes]
        if bad:
            raise RunError(f"{_exits(bad)}; allowed exit codes are {self.allowed_exit_codes} (see its log above)")


def _exits(processes: Sequence[BaseProcess]) -> str:
    return ", ".join(f"{p.name} (pid {p.pid}) exited with code {p.exitcode}" for p in processes)


def port_in_use_error(host: str, port: int) -> RunError:
    """What to do when the store server's port is taken: most often by `agl store`, which the run can use."""
    url = f"http://{'127.0.0.1' if host in _WILDCARD_HOSTS or host == 'localhost' else host}:{port}"
    if _answers_as_store(url):
        return RunError(
            f"port {port} is in use by an agentlightning store at {url} (`agl store`?). To send this run "
            f"to it and watch it in its dashboard, set AGL_STORE_URL={url} or pass Trainer(store={url!r}); "
            "to run with a store of its own instead, pass Trainer(port=0) or set AGL_SERVER_PORT=0 (a free port)"
        )
    return RunError(
        f"port {port} on {host} is in use by another program; pass Trainer(port=0) or set AGL_SERVER_PORT=0 "
        "to serve this run's store on a free port"
    )


def _answers_as_store(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/v1/agl/health", timeout=1.0) as response:
            return response.status == 200
    except OSError:
        return False


async def _wait_for_server(client: LightningStoreClient, stop_event: ExecutionEvent, worker_id: int) -> bool:
    """Poll the server's health check until it answers (True) or the stop event is set (False).

    Gives up with `RunError` after the client's retry budget (at least 1 s).
    """
    loop = asyncio.get_running_loop()
    budget = max(client.retry_budget, 1.0)
    deadline = loop.time() + budget
    announced = False
    while not stop_event.is_set():
        if await client.health():
            if announced:
                logger.info("Store server at %s is up", client.server_address)
            return True
        if loop.time() >= deadline:
            raise RunError(
                f"runner {worker_id}: no store server answered at {client.server_address}/health within "
                f"{budget:g} s (AGL_STORE_RETRY_BUDGET); start the algorithm process (AGL_CURRENT_ROLE=algorithm) "
                "or `agl store` first, and check AGL_SERVER_HOST / AGL_SERVER_PORT"
            )
        if not announced:
            logger.info("Waiting for the store server at %s", client.server_address)
            announced = True
        await asyncio.sleep(_MONITOR_INTERVAL)
    return False


def _send_sigint(process: BaseProcess) -> None:
    if process.pid is not None:
        os.kill(process.pid, signal.SIGINT)


def _die_with_parent(parent_pid: int) -> None:
    """Make the kernel SIGTERM this child if the parent dies without shutting it down (Linux only)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        # The parent died before prctl took effect.
        os._exit(1)


def _runner_process_main(
    strategy: ClientServerExecutionStrategy,
    runner: RunnerBundle,
    store: Optional[LightningStore],
    worker_id: int,
    stop_event: ExecutionEvent,
    parent_pid: int,
) -> None:
    _die_with_parent(parent_pid)
    try:
        asyncio.run(strategy._runner_side(runner, store, worker_id, stop_event))
    except KeyboardInterrupt:
        logger.info("Runner %d interrupted; exiting", worker_id)
    except (RunError, ConnectionError, PermissionError) as exc:  # their message says it all
        logger.error("Runner %d stopped: %s", worker_id, exc)
        stop_event.set()
        sys.exit(1)
    except BaseException:
        logger.exception("Runner %d crashed; asking every bundle to stop", worker_id)
        stop_event.set()
        sys.exit(1)


def _algorithm_process_main(
    strategy: ClientServerExecutionStrategy,
    algorithm: AlgorithmBundle,
    store: LightningStore,
    stop_event: ExecutionEvent,
    parent_pid: int,
) -> None:
    _die_with_parent(parent_pid)
    try:
        asyncio.run(strategy._algorithm_side(algorithm, store, stop_event))
    except KeyboardInterrupt:
        logger.info("Algorithm interrupted; exiting")
    except BaseException:
        logger.exception("Algorithm crashed; asking every bundle to stop")
        stop_event.set()
        sys.exit(1)
    finally:
        stop_event.set()
