"""RayExecutionStrategy: the algorithm and the store server in the driver, runners as Ray actors on the cluster."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from agentlightning.env_var import LightningEnvVar, resolve_bool_env_var
from agentlightning.store.base import LightningStore

from ._supervise import run_until_stopped
from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle
from .events import ExecutionEvent, ThreadingEvent

if TYPE_CHECKING:
    from agentlightning.store_http.server import LightningStoreServer

__all__ = ["RayExecutionStrategy", "RunnerActorInfo"]

logger = logging.getLogger(__name__)

_WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "")
_MONITOR_INTERVAL = 0.2
_HEALTH_POLL_SECONDS = 0.2


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            f"RayExecutionStrategy needs Ray ({exc}); install it with: pip install 'agentlightning[ray]'"
        ) from exc
    return ray


def _free_port(host: str) -> int:
    bind_host = "" if host in _WILDCARD_HOSTS else host
    with socket.socket() as sock:
        sock.bind((bind_host, 0))
        return int(sock.getsockname()[1])


@dataclass
class RunnerActorInfo:
    """Bookkeeping for one runner actor: where it runs and how often Ray has restarted it."""

    worker_id: int
    name: str
    handle: Any
    run_ref: Any = None
    probe_ref: Any = None
    incarnation: Optional[str] = None
    restarts: int = 0
    recovering_since: Optional[float] = None
    finished: bool = False
    error: Optional[str] = None
    locations: list[dict[str, Any]] = field(default_factory=list)


class _RunnerActor:
    """Body of a runner actor: connects to the driver's store server and runs one runner bundle.

    An async actor, so `stop()` is served while `run()` is executing. Each (re)start of the actor is a new
    incarnation; `run()` called again on a live incarnation joins the runner already running there.
    """

    def __init__(self, runner: RunnerBundle, worker_id: int, endpoint: str, auth_token: Optional[str]) -> None:
        self._runner = runner
        self._worker_id = worker_id
        self._endpoint = endpoint
        self._auth_token = auth_token
        self._stop_event = ThreadingEvent()
        self._task: Optional[asyncio.Task[None]] = None
        self._incarnation = uuid.uuid4().hex

    async def where(self) -> dict[str, Any]:
        ray = _import_ray()
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "incarnation": self._incarnation,
        }

    async def stop(self) -> None:
        self._stop_event.set()

    async def run(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())
        await asyncio.shield(self._task)

    async def _run(self) -> None:
        from agentlightning.store_http.client import LightningStoreClient

        client = LightningStoreClient(self._endpoint, auth_token=self._auth_token)
        try:
            while not self._stop_event.is_set():
                if await client.health():
                    break
                await asyncio.sleep(_HEALTH_POLL_SECONDS)
            else:
                return
            await self._runner(client, self._worker_id, self._stop_event)
        finally:
            await client.close()


class RayExecutionStrategy(ExecutionStrategy):
    """Run the algorithm and a `LightningStoreServer` here (the Ray driver) and `n_runners` runners as Ray actors.

    The runners reach the store over HTTP at `http://<advertise_host>:<server_port>` with a bearer token, so
    they can live on any node of the cluster. Actors request `num_cpus` / `num_gpus` / `resources` each
    and are spread over the nodes. When an actor dies (a crash, a lost node) Ray restarts it up to
    `max_restarts` times and the driver starts its runner again; the attempt it was running gets no more
    heartbeats, so the store's watchdog marks it `unresponsive` and, when the rollout's `RolloutConfig`
    allows a retry, requeues it exactly once for another runner.

    Shutdown (the algorithm ends or fails, every runner is gone, Ctrl+C): the runners get the stop signal
    and `graceful_timeout` seconds to finish, then every actor is killed without restart, then the store
    server stops. A Ray instance started here is shut down; a cluster joined with `address` is left running.

    Args:
        n_runners: runner actors.
        address: Ray cluster to join (`"auto"`, `"ray://head:10001"`, `"127.0.0.1:6379"`); None starts a
            local Ray unless `RAY_ADDRESS` is set or Ray is already initialized in this process.
        num_cpus, num_gpus, resources: what each runner actor requests from the scheduler.
        max_restarts: how many times Ray restarts a dead runner actor (-1: forever).
        server_host: interface the store server binds (default all interfaces, so other nodes reach it).
        server_port: its port (default: a free one).
        advertise_host: host the runners connect to (default: this node's IP as Ray sees it).
        auth_token: bearer token for the store server (default: a fresh random token per run).
        graceful_timeout: seconds runners have to stop after the stop signal before they are killed.
        scheduling_strategy: Ray scheduling strategy for the actors ("SPREAD" by default).
        runtime_env: Ray runtime environment for the actors (e.g. `{"pip": [...]}`, `{"env_vars": {...}}`).
        init_kwargs: extra keyword arguments for `ray.init` when this strategy calls it.
        namespace: Ray namespace of the actors (default: a fresh one per run).
        restart_timeout: how long to wait for a dead actor to come back before giving up on its runner.
        managed_store: serve the trainer's store from the driver (default, or `AGL_MANAGED_STORE`). False:
            the store is a `LightningStoreClient` of a store served elsewhere (`agl store` on the head node);
            runners connect to the same address with the same token and no server starts here.
    """

    alias = "ray"

    def __init__(
        self,
        n_runners: int = 1,
        address: Optional[str] = None,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        resources: Optional[Mapping[str, float]] = None,
        max_restarts: int = 3,
        server_host: str = "0.0.0.0",
        server_port: Optional[int] = None,
        advertise_host: Optional[str] = None,
        auth_token: Optional[str] = None,
        graceful_timeout: float = 10.0,
        scheduling_strategy: Any = "SPREAD",
        runtime_env: Optional[Mapping[str, Any]] = None,
        init_kwargs: Optional[Mapping[str, Any]] = None,
        namespace: Optional[str] = None,
        restart_timeout: float = 300.0,
        managed_store: Optional[bool] = None,
    ) -> None:
        if n_runners < 1:
            raise ValueError(f"n_runners must be >= 1, got {n_runners}")
        if num_cpus < 0 or num_gpus < 0:
            raise ValueError(f"num_cpus and num_gpus must be >= 0, got num_cpus={num_cpus}, num_gpus={num_gpus}")
        if max_restarts < -1:
            raise ValueError(f"max_restarts must be >= -1 (-1 restarts forever), got {max_restarts}")
        if graceful_timeout < 0:
            raise ValueError(f"graceful_timeout must be >= 0, got {graceful_timeout}")
        if server_port is not None and not 0 < server_port < 65536:
            raise ValueError(f"server_port must be in 1..65535, got {server_port}")
        for key, amount in (resources or {}).items():
            if amount < 0:
                raise ValueError(f"resources[{key!r}] must be >= 0, got {amount}")
        self.n_runners = n_runners
        self.address = address
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.resources: dict[str, float] = dict(resources or {})
        self.max_restarts = max_restarts
        self.server_host = server_host
        self.server_port = server_port
        self.advertise_host = advertise_host
        self.auth_token = auth_token
        self.graceful_timeout = graceful_timeout
        self.scheduling_strategy = scheduling_strategy
        self.runtime_env: Optional[dict[str, Any]] = dict(runtime_env) if runtime_env is not None else None
        self.init_kwargs: dict[str, Any] = dict(init_kwargs or {})
        self.namespace = namespace
        self.restart_timeout = restart_timeout
        self.managed_store: bool = resolve_bool_env_var(LightningEnvVar.AGL_MANAGED_STORE, managed_store, fallback=True)
        self.actors: list[RunnerActorInfo] = []
        """The runner actors of the current (or last) `execute`, for inspection."""
        self._runner_ref: Any = None

    def __repr__(self) -> str:
        return (
            f"RayExecutionStrategy(n_runners={self.n_runners}, address={self.address!r}, num_cpus={self.num_cpus}, "
            f"num_gpus={self.num_gpus}, resources={self.resources}, max_restarts={self.max_restarts})"
        )

    # ---- entry point ----

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        ray = _import_ray()
        self._check_picklable(ray, runner)
        started_ray = False
        if not ray.is_initialized():
            ray.init(address=self._init_address(), **self._init_kwargs())
            started_ray = True
        self._warn_if_runners_do_not_fit(ray)
        try:
            asyncio.run(self._drive(ray, algorithm, runner, store))
        except KeyboardInterrupt:
            logger.warning("Interrupted; the runner actors and the store server were stopped")
            raise
        finally:
            self._kill_actors(ray)
            if started_ray:
                ray.shutdown()

    def _init_address(self) -> Optional[str]:
        """`address`, else `RAY_ADDRESS` (None lets Ray read it), else "local": a fresh Ray for this run.

        Ray itself would join any cluster already running on this machine when given no address.
        """
        if self.address is not None:
            return self.address
        return None if os.environ.get("RAY_ADDRESS") else "local"

    def _init_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.init_kwargs)
        if self._init_address() == "local" and "num_cpus" not in kwargs:
            # Runners mostly wait on LLMs and tools: a local Ray gets room for all of them even on a small machine.
            kwargs["num_cpus"] = max(os.cpu_count() or 1, math.ceil(self.n_runners * self.num_cpus))
        return kwargs

    def _warn_if_runners_do_not_fit(self, ray: Any) -> None:
        """Runners that cannot be placed wait silently in Ray; say so up front (an autoscaler may still add nodes)."""
        available: dict[str, float] = ray.cluster_resources()
        wanted = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        for kind, per_runner in wanted.items():
            if per_runner <= 0:
                continue
            total = float(available.get(kind, 0.0))
            if total < per_runner * self.n_runners:
                logger.warning(
                    "The Ray cluster has %s %s in all, but %d runners ask for %s each: only %d can run until "
                    "nodes are added",
                    total,
                    kind,
                    self.n_runners,
                    per_runner,
                    int(total // per_runner),
                )

    @staticmethod
    def _check_picklable(ray: Any, runner: RunnerBundle) -> None:
        try:
            ray.cloudpickle.dumps(runner)
        except Exception as exc:
            raise TypeError(
                f"the runner bundle cannot be sent to Ray actors ({type(exc).__name__}: {exc}); the agent, runner, "
                "tracer and hooks must be picklable (open clients, locks and threads should be created lazily)"
            ) from exc

    def endpoint(self, ray: Any, port: int) -> str:
        """The URL the runner actors use to reach the store server."""
        host = self.advertise_host
        if host is None:
            host = self.server_host if self.server_host not in _WILDCARD_HOSTS else ray.util.get_node_ip_address()
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{port}"

    # ---- the driver ----

    async def _drive(self, ray: Any, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        server: Optional[LightningStoreServer] = None
        if self.managed_store:
            from agentlightning.store_http.server import LightningStoreServer

            port = self.server_port or _free_port(self.server_host)
            token = self.auth_token or secrets.token_urlsafe(24)
            server = LightningStoreServer(store, host=self.server_host, port=port, auth_token=token)
            await server.start()
            endpoint = self.endpoint(ray, port)
            algorithm_store: LightningStore = server
            logger.info("Store server listening on %s:%s; runners connect to %s", self.server_host, port, endpoint)
        else:
            endpoint, token = _external_endpoint(store)
            algorithm_store = store
            logger.info("Using the store at %s; runners connect there too", endpoint)
        stop_event = ThreadingEvent()
        monitor: Optional[asyncio.Task[None]] = None
        try:
            self.actors = self._start_actors(ray, runner, endpoint, token)
            monitor = asyncio.create_task(self._monitor(ray, stop_event))
            await run_until_stopped(
                algorithm(algorithm_store, stop_event),
                stop_event,
                graceful_delay=self.graceful_timeout,
                name="Algorithm",
            )
        finally:
            stop_event.set()
            if monitor is not None:
                monitor.cancel()
                await asyncio.gather(monitor, return_exceptions=True)
            # Runners still need the server to report their last attempts, so they stop first.
            await asyncio.to_thread(self._stop_actors, ray)
            if server is not None:
                await server.stop()

    def _start_actors(
        self, ray: Any, runner: RunnerBundle, endpoint: str, token: Optional[str]
    ) -> list[RunnerActorInfo]:
        namespace = self.namespace or f"agl-{uuid.uuid4().hex[:8]}"
        actor_cls = ray.remote(_RunnerActor)
        # Held for the whole run: Ray needs the constructor argument again to restart an actor.
        self._runner_ref = ray.put(runner)
        actors: list[RunnerActorInfo] = []
        for worker_id in range(self.n_runners):
            name = f"agl-runner-{worker_id}"
            options: dict[str, Any] = {
                "name": name,
                "namespace": namespace,
                "num_cpus": self.num_cpus,
                "num_gpus": self.num_gpus,
                "max_restarts": self.max_restarts,
                "max_task_retries": 0,
                "scheduling_strategy": self.scheduling_strategy,
            }
            if self.resources:
                options["resources"] = self.resources
            if self.runtime_env is not None:
                options["runtime_env"] = self.runtime_env
            handle = actor_cls.options(**options).remote(self._runner_ref, worker_id, endpoint, token)
            info = RunnerActorInfo(worker_id=worker_id, name=f"{namespace}/{name}", handle=handle)
            info.probe_ref = handle.where.remote()
            info.run_ref = handle.run.remote()
            actors.append(info)
        logger.info("Started %d runner actors in Ray namespace %s", len(actors), namespace)
        return actors

    async def _monitor(self, ray: Any, stop_event: ExecutionEvent) -> None:
        """Follow every actor through restarts; stop everything once no runner is left."""
        while not stop_event.is_set():
            for info in self.actors:
                if not info.finished:
                    self._check_actor(ray, info)
            if all(info.finished for info in self.actors):
                failed = [f"runner {i.worker_id}: {i.error}" for i in self.actors if i.error]
                if failed:
                    logger.error("Every runner actor is gone (%s); stopping the algorithm", "; ".join(failed))
                else:
                    logger.warning("Every runner actor finished; stopping the algorithm")
                stop_event.set()
                return
            await asyncio.sleep(_MONITOR_INTERVAL)

    def _check_actor(self, ray: Any, info: RunnerActorInfo) -> None:
        """One non-blocking step: note where the actor runs, and start its runner again after a restart.

        A failed `run()` means the actor died (crash, lost node) or is unreachable for now. A probe then
        waits for a live incarnation: a new one is a restart by Ray (counted, runner started again), the same
        one was a transient RPC failure (`run()` joins the runner still running there). `ActorDiedError`
        from the probe means Ray will not restart it (`max_restarts` used up).
        """
        if info.probe_ref is not None and ray.wait([info.probe_ref], timeout=0)[0]:
            probe, info.probe_ref = info.probe_ref, None
            try:
                location = ray.get(probe)
            except ray.exceptions.ActorDiedError as exc:
                info.finished = True
                info.error = f"actor died and Ray will not restart it ({_first_line(exc)})"
                logger.error("Runner %d %s", info.worker_id, info.error)
                return
            except ray.exceptions.RayActorError:
                location = None  # still restarting; probe again below
            if location is not None:
                if info.incarnation is not None and location["incarnation"] != info.incarnation:
                    info.restarts += 1
                    logger.warning(
                        "Runner %d restarted by Ray on node %s (restart %d); its runner starts again",
                        info.worker_id,
                        location["node_id"][:12],
                        info.restarts,
                    )
                info.incarnation = location["incarnation"]
                info.locations.append(location)
                if info.recovering_since is not None:
                    info.recovering_since = None
                    info.run_ref = info.handle.run.remote()
        if info.recovering_since is not None:
            if info.probe_ref is None:
                if time.monotonic() - info.recovering_since > self.restart_timeout:
                    info.finished = True
                    info.error = f"actor did not come back within {self.restart_timeout:.0f} s"
                    logger.error("Runner %d %s", info.worker_id, info.error)
                    return
                info.probe_ref = info.handle.where.remote()
            return
        if info.run_ref is None or not ray.wait([info.run_ref], timeout=0)[0]:
            return
        run, info.run_ref = info.run_ref, None
        try:
            ray.get(run)
            info.finished = True
            logger.info("Runner %d finished", info.worker_id)
        except ray.exceptions.RayActorError as exc:
            logger.warning(
                "Runner %d lost its actor (%s); waiting for Ray to restart it", info.worker_id, _first_line(exc)
            )
            info.recovering_since = time.monotonic()
            if info.incarnation is None and info.probe_ref is None:
                info.incarnation = "unknown"
        except Exception as exc:
            info.finished = True
            info.error = f"{type(exc).__name__}: {_first_line(exc)}"
            logger.error("Runner %d crashed: %s", info.worker_id, info.error)

    def _stop_actors(self, ray: Any) -> None:
        """Signal every runner, wait up to `graceful_timeout` for their `run()` calls, then kill the actors."""
        pending = []
        for info in self.actors:
            if info.finished:
                continue
            try:
                info.handle.stop.remote()
            except Exception:
                logger.debug("Runner %d did not take the stop signal", info.worker_id, exc_info=True)
            if info.run_ref is not None:
                pending.append(info.run_ref)
        if pending:
            _, not_ready = ray.wait(pending, num_returns=len(pending), timeout=self.graceful_timeout)
            if not_ready:
                logger.warning(
                    "%d runner actors did not stop within %.1f s; killing them", len(not_ready), self.graceful_timeout
                )
        self._kill_actors(ray)

    def _kill_actors(self, ray: Any) -> None:
        for info in self.actors:
            try:
                ray.kill(info.handle, no_restart=True)
            except Exception:
                logger.debug("Killing runner actor %s failed", info.name, exc_info=True)
            info.finished = True
        self._runner_ref = None


def _external_endpoint(store: LightningStore) -> tuple[str, Optional[str]]:
    from agentlightning.store_http.client import LightningStoreClient

    if not isinstance(store, LightningStoreClient):
        raise ValueError(
            f"managed_store=False needs the trainer's store to be a LightningStoreClient of a served store "
            f"(e.g. LightningStoreClient('http://head:4747') for `agl store`), got {type(store).__name__}"
        )
    return store.server_address, store.auth_token


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
