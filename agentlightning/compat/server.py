"""Deprecated v0.1 task server: hands queued tasks to `AgentLightningClient`s and collects their rollouts.

Superseded by `LightningStoreServer` in front of a `LightningStore`. Kept so v0.1 scripts keep working.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Optional

from fastapi import FastAPI, HTTPException

from agentlightning.types import (
    GenericResponse,
    NamedResources,
    ResourcesUpdate,
    RolloutLegacy,
    RolloutMode,
    Task,
    TaskIfAny,
    TaskInput,
)
from agentlightning.utils.deprecation import warn_deprecated_once
from agentlightning.utils.id import generate_id
from agentlightning.web.launcher import PythonServerLauncher, PythonServerLauncherArgs

__all__ = ["AgentLightningServer"]

logger = logging.getLogger(__name__)

_Waiter = tuple[asyncio.AbstractEventLoop, asyncio.Event]


class AgentLightningServer:
    """Deprecated v0.1 server: a task queue, versioned resources and a box of completed rollouts over HTTP.

    Routes: `GET /task` (claim the next task, `TaskIfAny`), `GET /resources/latest`,
    `GET /resources/{resource_id}`, `POST /rollout` (a `RolloutLegacy`, answered with `GenericResponse`).
    A claimed task whose rollout has not arrived within `task_timeout_seconds` goes back to the end of the
    queue (checked whenever a task is claimed). The server runs on its own thread, so its async methods may
    be awaited from any event loop. `port=0` picks a free port (see `endpoint` after `start()`).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 8000, task_timeout_seconds: float = 300.0) -> None:
        warn_deprecated_once(
            "AgentLightningServer",
            "AgentLightningServer is the deprecated v0.1 API; serve a LightningStore with "
            "agentlightning.LightningStoreServer instead",
        )
        if task_timeout_seconds <= 0:
            raise ValueError(f"task_timeout_seconds must be > 0, got {task_timeout_seconds}")
        self.host = host
        self.port = port
        self.task_timeout_seconds = task_timeout_seconds
        self.clock: Callable[[], float] = time.time
        """Time source for claims and staleness; replace it to control time in tests."""

        self._lock = threading.Lock()
        self._queue: deque[Task] = deque()
        self._processing: dict[str, Task] = {}
        self._completed: dict[str, RolloutLegacy] = {}
        self._resources: dict[str, ResourcesUpdate] = {}
        self._latest_resources_id: Optional[str] = None
        self._waiters: dict[str, list[_Waiter]] = {}

        self.app = self._build_app()
        self._launcher = PythonServerLauncher(
            self.app, PythonServerLauncherArgs(host=host, port=port, launch_mode="thread", access_log=False)
        )

    @property
    def endpoint(self) -> str:
        """Base URL clients use, e.g. `http://127.0.0.1:8000` (the bound port once started)."""
        return self._launcher.access_endpoint_for(self.port)

    # ---- lifecycle ----

    async def start(self) -> None:
        """Start serving in a background thread; returns once the server answers."""
        await self._launcher.start()
        if self._launcher.port is not None:
            self.port = self._launcher.port
        logger.info("AgentLightningServer serving at %s", self.endpoint)

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        await self._launcher.stop()

    async def run_forever(self) -> None:
        """Start if needed and serve until SIGINT/SIGTERM or cancellation."""
        if not self._launcher.is_running():
            await self.start()
        await self._launcher.run_forever()

    # ---- algorithm side ----

    async def queue_task(
        self,
        sample: TaskInput,
        mode: Optional[RolloutMode] = None,
        resources_id: Optional[str] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> str:
        """Queue `sample` as a task and return its rollout id; `resources_id=None` means the latest resources."""
        with self._lock:
            task = Task(
                rollout_id=f"ro-{generate_id(12)}",
                input=sample,
                mode=mode,
                resources_id=resources_id if resources_id is not None else self._latest_resources_id,
                create_time=self.clock(),
                num_claims=0,
                metadata=metadata or {},
            )
            self._queue.append(task)
        return task.rollout_id

    async def update_resources(self, resources: NamedResources) -> str:
        """Publish a new resources version, make it the latest, and return its id."""
        now = self.clock()
        update = ResourcesUpdate(
            resources_id=f"rs-{generate_id(12)}", create_time=now, update_time=now, version=1, resources=resources
        )
        with self._lock:
            self._resources[update.resources_id] = update
            self._latest_resources_id = update.resources_id
        return update.resources_id

    async def get_completed_rollout(self, rollout_id: str) -> Optional[RolloutLegacy]:
        """Take the completed rollout `rollout_id` out of the server, or None if it has not arrived."""
        with self._lock:
            return self._completed.pop(rollout_id, None)

    async def poll_completed_rollout(self, rollout_id: str, timeout: Optional[float] = None) -> Optional[RolloutLegacy]:
        """Wait (up to `timeout` seconds; None waits forever) for rollout `rollout_id` and take it out."""
        waiter: _Waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            if rollout_id in self._completed:
                return self._completed.pop(rollout_id)
            self._waiters.setdefault(rollout_id, []).append(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout)
        except asyncio.TimeoutError:
            logger.debug("rollout %s not completed within %ss", rollout_id, timeout)
        finally:
            with self._lock:
                waiters = self._waiters.get(rollout_id, [])
                if waiter in waiters:
                    waiters.remove(waiter)
                if not waiters:
                    self._waiters.pop(rollout_id, None)
        return await self.get_completed_rollout(rollout_id)

    async def retrieve_completed_rollouts(self) -> list[RolloutLegacy]:
        """Take every completed rollout out of the server."""
        with self._lock:
            rollouts = list(self._completed.values())
            self._completed.clear()
        return rollouts

    # ---- client side (the HTTP routes) ----

    def _claim_next_task(self) -> TaskIfAny:
        with self._lock:
            now = self.clock()
            for rollout_id, task in list(self._processing.items()):
                if task.last_claim_time is not None and now - task.last_claim_time > self.task_timeout_seconds:
                    logger.warning(
                        "task %s was claimed %.1fs ago without a rollout; requeueing it",
                        rollout_id,
                        now - task.last_claim_time,
                    )
                    del self._processing[rollout_id]
                    self._queue.append(task)
            if not self._queue:
                return TaskIfAny(is_available=False)
            task = self._queue.popleft()
            task = task.model_copy(update={"last_claim_time": now, "num_claims": (task.num_claims or 0) + 1})
            self._processing[task.rollout_id] = task
            return TaskIfAny(is_available=True, task=task)

    def _get_resources(self, resources_id: Optional[str]) -> ResourcesUpdate:
        with self._lock:
            update = self._resources.get(resources_id) if resources_id is not None else None
        if update is None:
            if resources_id is None:
                raise HTTPException(404, "no resources yet; publish some with server.update_resources()")
            raise HTTPException(404, f"resources {resources_id!r} not found; was it published to this server?")
        return update

    def _complete(self, rollout: RolloutLegacy) -> None:
        with self._lock:
            task = self._processing.pop(rollout.rollout_id, None)
            requeued = [t for t in self._queue if t.rollout_id == rollout.rollout_id]
            for stale in requeued:
                self._queue.remove(stale)
            task = task or (requeued[0] if requeued else None)
            if rollout.task is None and task is not None:
                rollout = rollout.model_copy(update={"task": task})
            self._completed[rollout.rollout_id] = rollout
            waiters = self._waiters.pop(rollout.rollout_id, [])
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                logger.debug("a waiter for rollout %s left with its closed event loop", rollout.rollout_id)

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="Agent Lightning v0.1 task server (deprecated)")

        @app.get("/task", response_model=TaskIfAny)
        async def next_task() -> TaskIfAny:
            return self._claim_next_task()

        @app.get("/resources/latest", response_model=ResourcesUpdate)
        async def latest_resources() -> ResourcesUpdate:
            return self._get_resources(self._latest_resources_id)

        @app.get("/resources/{resource_id}", response_model=ResourcesUpdate)
        async def resources_by_id(resource_id: str) -> ResourcesUpdate:
            return self._get_resources(resource_id)

        @app.post("/rollout", response_model=GenericResponse)
        async def post_rollout(rollout: RolloutLegacy) -> GenericResponse:
            self._complete(rollout)
            return GenericResponse(message=f"rollout {rollout.rollout_id} received")

        return app
