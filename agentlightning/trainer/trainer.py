"""Trainer: builds the components from specs and hands an algorithm bundle and a runner bundle to a strategy."""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import inspect
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

from agentlightning.algorithm.base import Algorithm
from agentlightning.algorithm.fast import FastAlgorithm
from agentlightning.execution.base import ExecutionStrategy
from agentlightning.execution.client_server import ClientServerExecutionStrategy
from agentlightning.execution.errors import RolloutsFailedError, RunError, report_run_errors_in_one_line
from agentlightning.execution.events import ExecutionEvent
from agentlightning.execution.ray_strategy import RayExecutionStrategy
from agentlightning.execution.shared_memory import SharedMemoryExecutionStrategy
from agentlightning.runner.failures import share_first_traceback
from agentlightning.store.base import LightningStore
from agentlightning.tracking import TRACKING_ENV_VAR, TrackingSpec, make_tracker
from agentlightning.types import Dataset, Hook, NamedResources

from .init_utils import build_component
from .progress import PROGRESS_INTERVAL_SECONDS, RunProgress, format_duration
from .registry import ExecutionStrategyRegistry, StoreRegistry, TracerRegistry
from .remote import is_store_url, store_url_from_env, wait_until_store_answers
from .run_store import RunStore, default_run_name
from .summary import FitSummary, describe_store, summarize_run

if TYPE_CHECKING:
    from agentlightning.adapter import TraceAdapter
    from agentlightning.litagent import LitAgent
    from agentlightning.llm_proxy import LLMProxy
    from agentlightning.runner import Runner
    from agentlightning.tracer.base import Tracer

__all__ = ["Trainer"]

logger = logging.getLogger(__name__)

ComponentSpec = Any
"""An instance, a class, a zero-argument factory, an import path / registry name, a dict, or None."""

_STOP_POLL_SECONDS = 0.1


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"Trainer({old}=...) is deprecated; use {new} instead", DeprecationWarning, stacklevel=3)


def default_tracer(daemon: bool = True) -> Tracer:
    """AgentOpsTracer when the agentops extra is installed, else an OtelTracer (both capture OpenAI calls)."""
    if importlib.util.find_spec("agentops") is not None:
        from agentlightning.tracer.agentops import AgentOpsTracer

        return AgentOpsTracer(agentops_managed=True, instrument_managed=True, daemon=daemon)
    from agentlightning.tracer.otel import OtelTracer

    return OtelTracer()


class Trainer:
    """Wire an agent, an algorithm, a store, a tracer, an adapter and runners, and run them with a strategy.

    Components may be given as instances, classes, factories, import paths, registry names or dicts
    (`{"type": ..., **kwargs}`); see `agentlightning.trainer.init_utils.build_component`.

    Args:
        n_runners: runner workers (default 1); a strategy that sets its own `n_runners` wins.
        max_rollouts: stop each runner after this many rollouts (None: no limit).
        initial_resources: resources the algorithm publishes first (e.g. the seed prompt template).
        tracer: default `AgentOpsTracer` when agentops is installed, else `OtelTracer`.
        adapter: default `TracerTraceToTriplet()`; a dict without `type` configures that class.
        store: default `InMemoryLightningStore` (thread-safe under the client-server strategy), or the store
            server at `AGL_STORE_URL` when that is set. A URL (`"http://127.0.0.1:4747"`, e.g. `agl store`)
            sends the run to that server, whose dashboard then shows it; no store server of the run's own
            is started. `fit` waits up to 10 s for such a store to answer, then raises `RunError`.
        runner: default `LitAgentRunner(tracer=<tracer>, max_rollouts=<max_rollouts>)`.
        strategy: default `ClientServerExecutionStrategy(n_runners=..., server_port=port)`; aliases "cs", "shm".
        port: store server port for the client-server strategy (else `AGL_SERVER_PORT`, else 4747).
        algorithm: what `fit` runs; a list runs its algorithms one after another on the same store, each
            starting from what the previous one left (`agentlightning.algorithm.schedule`); None just keeps
            the runners serving until stopped.
        llm_proxy: optional `LLMProxy` (dict specs get the store injected).
        hooks: one `Hook` or a sequence of them, called by the runners around each rollout.
        dev, n_workers, max_tasks, triplet_exporter: deprecated aliases (`.dev()`, `n_runners`,
            `max_rollouts`, `adapter`).
        daemon: passed to the default AgentOps tracer.
        summary: print a short summary when `fit`/`dev` ends (rollouts succeeded/failed, failures by
            error, mean reward per mode, where the store is); it is also kept on `last_summary`.
        tracking: experiment tracking backends the algorithm logs to (`["wandb", "mlflow", "tensorboard"]`,
            a `TrackingConfig` or a `Tracker`); None: `AGL_TRACKING`, else the algorithm's own setting.
        progress_interval: while the algorithm runs, print a progress line to stderr every this many
            seconds (default 20; None or 0: none).
        run_name: tags every rollout of a `fit`/`dev` (`metadata["agl_run"]`) so a dashboard shared by
            several runs keeps them apart; default `<script> <start time>`.

    `fit` and `dev` raise `RunError` with a short traceback when the run cannot start or go on (a port in
    use, a store or runner that stops answering; see `execution.md`), and `RolloutsFailedError` when
    every rollout failed, after printing the summary: a script that failed exits non-zero.
    """

    def __init__(
        self,
        *,
        dev: bool = False,
        n_runners: Optional[int] = None,
        max_rollouts: Optional[int] = None,
        initial_resources: Optional[NamedResources] = None,
        tracer: ComponentSpec = None,
        adapter: ComponentSpec = None,
        store: ComponentSpec = None,
        runner: ComponentSpec = None,
        strategy: ComponentSpec = None,
        port: Optional[int] = None,
        algorithm: ComponentSpec = None,
        llm_proxy: ComponentSpec = None,
        n_workers: Optional[int] = None,
        max_tasks: Optional[int] = None,
        daemon: bool = True,
        triplet_exporter: ComponentSpec = None,
        hooks: Optional[Union[Hook, Sequence[Hook]]] = None,
        summary: bool = True,
        tracking: TrackingSpec = None,
        progress_interval: Optional[float] = PROGRESS_INTERVAL_SECONDS,
        run_name: Optional[str] = None,
    ) -> None:
        if dev:
            _deprecated("dev", "trainer.dev(agent, ...)")
        if n_workers is not None:
            _deprecated("n_workers", "n_runners")
            if n_runners is not None and n_runners != n_workers:
                raise ValueError(f"n_runners={n_runners} and deprecated n_workers={n_workers} disagree; pass n_runners")
            n_runners = n_workers
        if max_tasks is not None:
            _deprecated("max_tasks", "max_rollouts")
            if max_rollouts is not None and max_rollouts != max_tasks:
                raise ValueError(
                    f"max_rollouts={max_rollouts} and deprecated max_tasks={max_tasks} disagree; pass max_rollouts"
                )
            max_rollouts = max_tasks
        if triplet_exporter is not None:
            _deprecated("triplet_exporter", "adapter")
            if adapter is not None:
                raise ValueError("pass either adapter or the deprecated triplet_exporter, not both")
            adapter = triplet_exporter

        self._dev = dev
        self.n_runners: int = 1 if n_runners is None else n_runners
        if self.n_runners < 1:
            raise ValueError(f"n_runners must be >= 1, got {self.n_runners}")
        self.max_rollouts = max_rollouts
        self.initial_resources = initial_resources
        self.daemon = daemon
        self.port = port
        self.summary = summary
        self.tracking = tracking
        self.progress_interval = progress_interval
        self.run_name = run_name
        self.last_summary: Optional[FitSummary] = None
        """What the last `fit`/`dev` did (None until one ends, and in a runner-only process)."""

        self.tracer: Tracer = self._make_tracer(tracer)
        self.adapter: TraceAdapter[Any] = self._make_adapter(adapter)
        self.algorithm: Optional[Algorithm] = self._make_algorithm(algorithm)
        self.strategy: ExecutionStrategy = self._make_strategy(strategy)
        strategy_runners = getattr(self.strategy, "n_runners", None)
        if isinstance(strategy_runners, int):
            self.n_runners = strategy_runners
        self._store_source = "store=..."
        self.store: LightningStore = self._make_store(store)
        self.runner: Runner[Any] = self._make_runner(runner)
        self.llm_proxy: Optional[LLMProxy] = self._make_llm_proxy(llm_proxy)
        self.hooks: tuple[Hook, ...] = self._normalize_hooks(hooks)

    # ---- backward-compatible attributes ----

    @property
    def n_workers(self) -> int:
        """Deprecated alias of `n_runners`."""
        return self.n_runners

    @property
    def max_tasks(self) -> Optional[int]:
        """Deprecated alias of `max_rollouts`."""
        return self.max_rollouts

    @property
    def triplet_exporter(self) -> TraceAdapter[Any]:
        """Deprecated alias of `adapter`."""
        return self.adapter

    # ---- component construction ----

    def _make_tracer(self, spec: ComponentSpec) -> Tracer:
        from agentlightning.tracer.base import Tracer

        return build_component(
            spec,
            expected_type=Tracer,
            spec_name="tracer",
            default_factory=lambda: default_tracer(self.daemon),
            registry=TracerRegistry,
        )

    def _make_adapter(self, spec: ComponentSpec) -> TraceAdapter[Any]:
        from agentlightning.adapter import TraceAdapter, TracerTraceToTriplet

        return build_component(
            spec,
            expected_type=TraceAdapter,
            spec_name="adapter",
            default_factory=TracerTraceToTriplet,
            dict_requires_type=False,
            dict_default_cls=TracerTraceToTriplet,
        )

    def _make_algorithm(self, spec: ComponentSpec) -> Optional[Algorithm]:
        if isinstance(spec, (list, tuple)):  # a schedule: the algorithms run one after another
            from agentlightning.algorithm.schedule import Schedule

            stages: list[Algorithm] = [
                build_component(stage, expected_type=Algorithm, spec_name=f"algorithm[{index}]")
                for index, stage in enumerate(spec)  # pyright: ignore[reportUnknownArgumentType, reportUnknownVariableType]
            ]
            return Schedule(stages)
        return build_component(spec, expected_type=Algorithm, spec_name="algorithm", allow_none=True)

    def _make_strategy(self, spec: ComponentSpec) -> ExecutionStrategy:
        optional_defaults: dict[str, Any] = {"n_runners": self.n_runners}
        if self.port is not None:
            optional_defaults["server_port"] = self.port
        strategy = build_component(
            spec,
            expected_type=ExecutionStrategy,
            spec_name="strategy",
            default_factory=lambda: ClientServerExecutionStrategy(n_runners=self.n_runners, server_port=self.port),
            optional_defaults=optional_defaults,
            registry=ExecutionStrategyRegistry,
        )
        if self.port is not None and isinstance(strategy, ClientServerExecutionStrategy):
            strategy.server_port = self.port
        return strategy

    def _make_store(self, spec: ComponentSpec) -> LightningStore:
        # Strategies that serve the store over HTTP touch it from the server thread and the algorithm's loop.
        thread_safe = isinstance(self.strategy, (ClientServerExecutionStrategy, RayExecutionStrategy))

        def default_store() -> LightningStore:
            from agentlightning.store.memory import InMemoryLightningStore

            return InMemoryLightningStore(thread_safe=thread_safe)

        if spec is None and (env_url := store_url_from_env()) is not None:
            spec, self._store_source = env_url, f"AGL_STORE_URL={env_url}"
        if isinstance(spec, str) and is_store_url(spec):
            from agentlightning.store_http.client import LightningStoreClient

            spec = LightningStoreClient(spec)
        store = build_component(
            spec,
            expected_type=LightningStore,
            spec_name="store",
            default_factory=default_store,
            registry=StoreRegistry,
        )
        if self._remote_client(store) is not None and getattr(self.strategy, "managed_store", False):
            # The store is already served and shared across processes: nothing to wrap or serve again.
            logger.debug("store is a %s: the strategy uses it as given", type(store).__name__)
            self.strategy.managed_store = False  # type: ignore[attr-defined]
        return store

    @staticmethod
    def _remote_client(store: LightningStore) -> Optional[Any]:
        """`store` when it is a `LightningStoreClient` (imported only if the caller made one)."""
        client_module = sys.modules.get("agentlightning.store_http.client")
        if client_module is not None and isinstance(store, client_module.LightningStoreClient):
            return store
        return None

    def _make_runner(self, spec: ComponentSpec) -> Runner[Any]:
        from agentlightning.runner import LitAgentRunner, Runner

        optional_defaults: dict[str, Any] = {"tracer": self.tracer}
        if self.max_rollouts is not None:
            optional_defaults["max_rollouts"] = self.max_rollouts
        return build_component(
            spec,
            expected_type=Runner,
            spec_name="runner",
            default_factory=lambda: LitAgentRunner(tracer=self.tracer, max_rollouts=self.max_rollouts),
            optional_defaults=optional_defaults,
            dict_requires_type=False,
            dict_default_cls=LitAgentRunner,
        )

    def _make_llm_proxy(self, spec: ComponentSpec) -> Optional[LLMProxy]:
        if spec is None:
            return None
        from agentlightning.llm_proxy import LLMProxy

        return build_component(
            spec,
            expected_type=LLMProxy,
            spec_name="llm_proxy",
            allow_none=True,
            optional_defaults={"store": self.store},
            dict_requires_type=False,
            dict_default_cls=LLMProxy,
        )

    @staticmethod
    def _normalize_hooks(hooks: Optional[Union[Hook, Sequence[Hook]]]) -> tuple[Hook, ...]:
        if hooks is None:
            return ()
        items = (hooks,) if isinstance(hooks, Hook) else tuple(hooks)
        for hook in items:
            if not isinstance(hook, Hook):
                raise TypeError(f"hooks must be agl.Hook instances, got {type(hook).__name__}")
        return items

    # ---- public entry points ----

    def fit(
        self,
        agent: LitAgent[Any],
        train_dataset: Optional[Union[Dataset[Any], str]] = None,
        *,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> None:
        """Train: run the algorithm and `n_runners` runners of `agent` until the algorithm finishes.

        v0.3 code may still pass a v0.1 backend (a server URL or an `AgentLightningClient`) instead of a
        dataset; that deprecated call is handed to `agentlightning.trainer.legacy`.
        """
        if _is_v01_backend(train_dataset):
            self._fit_v01_backend(agent, train_dataset)
            return
        if self._dev:
            self.dev(agent, train_dataset, val_dataset=val_dataset)
            return
        self._execute(agent, self.algorithm, train_dataset, val_dataset)

    # ---- the v0.3 public entry points of v0.1 training; their code lives in `trainer/legacy.py` ----

    def fit_v0(self, agent: LitAgent[Any], backend: Any, *args: Any, **kwargs: Any) -> None:
        """Deprecated v0.1 training against an `AgentLightningServer`; see `trainer/legacy.py`."""
        from .legacy import TrainerLegacy

        TrainerLegacy.fit_v0(self, agent, backend, *args, **kwargs)  # pyright: ignore[reportArgumentType]

    def _fit_v01_backend(self, agent: LitAgent[Any], backend: Any) -> None:
        from .legacy import fit_with_v01_backend

        fit_with_v01_backend(self, agent, backend)

    def dev(
        self,
        agent: LitAgent[Any],
        train_dataset: Optional[Dataset[Any]] = None,
        *,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> None:
        """Dry run with a fast algorithm (default `Baseline()`) to check the agent and its spans end to end."""
        algorithm = self.algorithm
        if algorithm is None:
            from agentlightning.algorithm.baseline import Baseline

            algorithm = Baseline()
        if not isinstance(algorithm, FastAlgorithm):
            raise TypeError(
                f"Trainer.dev() only runs a FastAlgorithm (such as agl.Baseline()), got {type(algorithm).__name__}; "
                "use Trainer.fit() for full algorithms"
            )
        self._execute(agent, algorithm, train_dataset, val_dataset)

    # ---- bundles ----

    def _execute(
        self,
        agent: LitAgent[Any],
        algorithm: Optional[Algorithm],
        train_dataset: Optional[Dataset[Any]],
        val_dataset: Optional[Dataset[Any]],
    ) -> None:
        agent.set_trainer(self)
        started_at = time.time()
        self.last_summary = None
        share_first_traceback()
        try:
            remote = self._remote_client(self.store)
            if remote is not None:
                wait_until_store_answers(remote, self._store_source)
            run = self.run_name or default_run_name(started_at)
            self.strategy.execute(
                self._algorithm_bundle(algorithm, run, started_at, train_dataset, val_dataset),
                self._runner_bundle(agent, run),
                self.store,
            )
        except (RunError, ConnectionError) as exc:  # a RunError says it all; a store client gave up retrying
            report_run_errors_in_one_line()  # one line when uncaught
            raise (exc.with_traceback(None) if isinstance(exc, RunError) else RunError(str(exc))) from None
        except KeyboardInterrupt:
            elapsed = format_duration(time.time() - started_at)
            print(f"agentlightning: interrupted after {elapsed}; stopped", file=sys.stderr, flush=True)
            raise KeyboardInterrupt from None
        summary = self.last_summary
        if summary is None:
            return
        if self.summary:
            print(summary.render(), flush=True)
        if summary.all_failed:
            report_run_errors_in_one_line()
            raise RolloutsFailedError(
                f"all {summary.failed} rollouts failed ({summary.failure_counts()}); the first one's traceback "
                "is in the log above"
            ) from None

    def _runner_bundle(self, agent: LitAgent[Any], run: str) -> _RunnerBundle:
        """The runners take this run's rollouts only, when they serve this process's algorithm (or the run is
        named); runner-only processes of an unnamed run take every run's."""
        copy_per_worker = isinstance(self.strategy, SharedMemoryExecutionStrategy) and self.n_runners > 1
        serves_this_run = getattr(self.strategy, "role", "both") == "both" or self.run_name is not None
        return _RunnerBundle(self.runner, agent, self.hooks, copy_per_worker, run if serves_this_run else None)

    def _algorithm_bundle(
        self,
        algorithm: Optional[Algorithm],
        run: str,
        started_at: float,
        train_dataset: Optional[Dataset[Any]],
        val_dataset: Optional[Dataset[Any]],
    ) -> Callable[[LightningStore, ExecutionEvent], Any]:
        async def algorithm_bundle(store: LightningStore, event: ExecutionEvent) -> None:
            if algorithm is None:
                await self._run_algorithm(algorithm, store, event, train_dataset, val_dataset)
                return
            run_store = RunStore(store, run)
            progress = RunProgress(
                run_store,
                algorithm_name=type(algorithm).__name__,
                interval=self.progress_interval,
                phase=getattr(algorithm, "describe_phase", None),
            )
            await progress.run_alongside(self._run_algorithm(algorithm, run_store, event, train_dataset, val_dataset))
            try:
                served_at = _served_at(store) if store is not self.store else None
                self.last_summary = await summarize_run(
                    store,
                    started_at=started_at,
                    store_description=describe_store(self.store, served_at=served_at),
                    rollout_ids=run_store.rollout_ids,
                )
            except Exception:  # the summary is a courtesy; it must never fail a finished run
                logger.warning("Could not summarize the run", exc_info=True)

        return algorithm_bundle

    async def _run_algorithm(
        self,
        algorithm: Optional[Algorithm],
        store: LightningStore,
        event: ExecutionEvent,
        train_dataset: Optional[Dataset[Any]],
        val_dataset: Optional[Dataset[Any]],
    ) -> None:
        if algorithm is None:
            logger.info("No algorithm configured; serving runners until the stop event")
            while not event.is_set():
                await asyncio.sleep(_STOP_POLL_SECONDS)
            return
        tracker = None
        if self.tracking is not None or os.environ.get(TRACKING_ENV_VAR):
            tracker = make_tracker(self.tracking, run_name=type(algorithm).__name__)
            algorithm.set_tracker(tracker)
        try:
            await self._run_with(algorithm, store, train_dataset, val_dataset)
        finally:
            if tracker is not None:
                algorithm.set_tracker(None)
                tracker.finish()

    async def _run_with(
        self,
        algorithm: Algorithm,
        store: LightningStore,
        train_dataset: Optional[Dataset[Any]],
        val_dataset: Optional[Dataset[Any]],
    ) -> None:
        algorithm.set_trainer(self)
        algorithm.set_store(store)
        algorithm.set_adapter(self.adapter)
        if self.initial_resources is not None:
            algorithm.set_initial_resources(self.initial_resources)
        if self.llm_proxy is not None:
            self.llm_proxy.set_store(store)
            algorithm.set_llm_proxy(self.llm_proxy)
        if algorithm.is_async():
            result = algorithm.run(train_dataset=train_dataset, val_dataset=val_dataset)
        else:
            # Sync algorithms may block or start their own event loops, so they get a thread of their own.
            result = await _run_in_daemon_thread(
                lambda: algorithm.run(train_dataset=train_dataset, val_dataset=val_dataset),
                f"AgentLightning-{type(algorithm).__name__}",
            )
        if inspect.isawaitable(result):
            await result


class _RunnerBundle:
    """The runner side of `Trainer.fit`: picklable (no reference to the trainer), so a strategy can ship it
    to another process or machine (Ray actors)."""

    def __init__(
        self,
        runner: Runner[Any],
        agent: LitAgent[Any],
        hooks: tuple[Hook, ...],
        copy_per_worker: bool,
        run: Optional[str] = None,
    ):
        self.runner = runner
        self.agent = agent
        self.hooks = hooks
        self.copy_per_worker = copy_per_worker
        self.run = run

    def runner_for_worker(self, worker_id: int) -> Runner[Any]:
        """The runner instance for a worker: its own shallow copy when several share this process."""
        if worker_id == 0 or not self.copy_per_worker:
            return self.runner
        return copy.copy(self.runner)

    async def __call__(self, store: LightningStore, worker_id: int, event: ExecutionEvent) -> None:
        runner = self.runner_for_worker(worker_id)
        runner.run_name = self.run
        runner.init(agent=self.agent, hooks=list(self.hooks))
        try:
            runner.init_worker(worker_id, store)
            try:
                await runner.iter(event=event)
            finally:
                runner.teardown_worker(worker_id)
        finally:
            runner.teardown()


def _is_v01_backend(candidate: Any) -> bool:
    """A v0.1 server URL or client; the client class is only loaded if the caller made one."""
    client_module = sys.modules.get("agentlightning.compat.client")
    return isinstance(candidate, str) or (
        client_module is not None and isinstance(candidate, client_module.AgentLightningClient)
    )


def _served_at(store: LightningStore) -> Optional[str]:
    """The URL a strategy served the run's store at (a started `LightningStoreServer`), else None."""
    try:
        endpoint = getattr(store, "endpoint", None)
    except RuntimeError:  # a server that never started
        return None
    return endpoint if isinstance(endpoint, str) else None


async def _run_in_daemon_thread(func: Callable[[], Any], name: str) -> Any:
    """Run a blocking call in a daemon thread, so a cancelled run never keeps the process alive."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: Optional[BaseException]) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def target() -> None:
        try:
            result, error = func(), None
        except BaseException as exc:
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:
            logger.debug("%s finished after its event loop closed", name)

    threading.Thread(target=target, name=name, daemon=True).start()
    return await future
