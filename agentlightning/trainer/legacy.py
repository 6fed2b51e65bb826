"""Deprecated v0.1 training (`Trainer.fit_v0`, `Trainer.fit(agent, <server URL>)`): workers pull tasks from an
`AgentLightningServer` through the v0.1 client of `agentlightning.compat`."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

from agentlightning.types import Hook
from agentlightning.utils.deprecation import warn_deprecated_once

if TYPE_CHECKING:
    from agentlightning.adapter import TraceAdapter
    from agentlightning.compat.client import AgentLightningClient
    from agentlightning.litagent import LitAgent
    from agentlightning.tracer.base import Tracer

__all__ = ["TrainerLegacy", "fit_with_v01_backend"]

logger = logging.getLogger(__name__)

Backend = Union[str, "AgentLightningClient"]


class TrainerLegacy:
    """`fit_v0`, the v0.1 `Trainer.fit(agent, "http://server")`; `Trainer` supplies the attributes below."""

    tracer: Tracer
    adapter: TraceAdapter[Any]
    n_runners: int
    max_rollouts: Optional[int]
    hooks: tuple[Hook, ...]
    _dev: bool

    def fit_v0(
        self,
        agent: LitAgent[Any],
        train_data: Backend,
        *,
        val_data: Optional[Backend] = None,
        dev_data: Optional[Backend] = None,
        dev_backend: Optional[Backend] = None,
    ) -> None:
        """Run `n_runners` `LegacyAgentRunner`s against `train_data` (a server URL or a client).

        Each runner stops after `max_rollouts` tasks (never when None). With `Trainer(dev=True)` a given
        `dev_data` (e.g. a `DevTaskLoader`; `dev_backend` is its deprecated v0.3 name) replaces `train_data`.
        `val_data` is accepted as in v0.3: the v0.1 server hands out validation tasks itself. Several runners
        run in child processes.
        """
        if dev_backend is not None:
            if dev_data is not None:
                raise ValueError("dev_data and dev_backend cannot both be given; dev_backend is the old name")
            dev_data = dev_backend
        del val_data  # v0.1 validation tasks come from the server, as in v0.3 without an algorithm
        warn_deprecated_once(
            "Trainer.fit_v0",
            "Trainer.fit(agent, <server URL>) is the deprecated v0.1 API; enqueue tasks into a LightningStore "
            "and call Trainer.fit(agent, train_dataset) instead",
        )
        from agentlightning.compat.client import AgentLightningClient

        target = dev_data if self._dev and dev_data is not None else train_data
        client = target if isinstance(target, AgentLightningClient) else AgentLightningClient(endpoint=target)
        agent.set_trainer(self)
        args = (agent, client, self.tracer, self.adapter, self.hooks, self.max_rollouts)
        if self.n_runners == 1:
            run_legacy_worker(*args, 0)
            return
        _run_worker_processes(args, self.n_runners)


def run_legacy_worker(
    agent: LitAgent[Any],
    client: AgentLightningClient,
    tracer: Tracer,
    adapter: Optional[TraceAdapter[Any]],
    hooks: Sequence[Hook],
    max_tasks: Optional[int],
    worker_id: int,
) -> None:
    """One v0.1 worker: a `LegacyAgentRunner` over its whole lifecycle, until it stops."""
    from agentlightning.runner.legacy import LegacyAgentRunner

    runner = LegacyAgentRunner(
        agent, client, tracer, triplet_exporter=adapter, worker_id=worker_id, max_tasks=max_tasks
    )
    runner.init(agent, hooks=list(hooks))
    try:
        runner.init_worker(worker_id)
        try:
            asyncio.run(runner.iter())
        finally:
            runner.teardown_worker(worker_id)
    finally:
        runner.teardown()


def _run_worker_processes(args: tuple[Any, ...], n_workers: int) -> None:
    use_fork = sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork") if use_fork else multiprocessing.get_context()
    processes = [
        ctx.Process(target=run_legacy_worker, args=(*args, worker_id), name=f"AgentLightning-LegacyWorker-{worker_id}")
        for worker_id in range(n_workers)
    ]
    for process in processes:
        process.start()
    try:
        for process in processes:
            process.join()
    except KeyboardInterrupt:
        logger.info("interrupted; stopping %d legacy runner process(es)", n_workers)
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join()
        raise
    failed = [f"{p.name} (exit code {p.exitcode})" for p in processes if p.exitcode != 0]
    if failed:
        raise RuntimeError(f"legacy runner worker(s) failed: {', '.join(failed)}; see their logs above")


def fit_with_v01_backend(trainer: Any, agent: LitAgent[Any], backend: Backend) -> None:
    """`Trainer.fit(agent, <v0.1 backend>)`: `fit_v0`, refusing a `DevTaskLoader` it would serve for ever."""
    from agentlightning.compat.client import DevTaskLoader

    if isinstance(backend, DevTaskLoader) and trainer.max_rollouts is None:
        raise TypeError(
            "Trainer.fit(agent, DevTaskLoader(...)) would run for ever: the loader serves its tasks in a "
            "cycle. Use Trainer(max_rollouts=N).fit_v0(agent, <url>, dev_backend=loader) for the v0.1 "
            "flow, or Trainer.dev(agent, tasks) / Trainer.fit(agent, tasks) with a plain list of tasks"
        )
    TrainerLegacy.fit_v0(trainer, agent, backend)
