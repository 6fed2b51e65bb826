"""Deprecated v0.1 clients: `AgentLightningClient` talks to an `AgentLightningServer`; `DevTaskLoader` fakes one.

Superseded by `LightningStoreClient` (and `LitAgentRunner`, which pulls rollouts from any store).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Optional, Union

import httpx

from agentlightning.types import GenericResponse, NamedResources, ResourcesUpdate, RolloutLegacy, Task, TaskIfAny
from agentlightning.types.core import TaskInput
from agentlightning.utils.deprecation import warn_deprecated_once

__all__ = ["AgentLightningClient", "DevTaskLoader"]

logger = logging.getLogger(__name__)

_JSON = {"Content-Type": "application/json"}


def _task_from(response: httpx.Response) -> Optional[Task]:
    response.raise_for_status()
    answer = TaskIfAny.model_validate(response.json())
    return answer.task if answer.is_available else None


def _resources_from(response: httpx.Response) -> Optional[ResourcesUpdate]:
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return ResourcesUpdate.model_validate(response.json())


def _generic_from(response: httpx.Response) -> GenericResponse:
    response.raise_for_status()
    return GenericResponse.model_validate(response.json())


class AgentLightningClient:
    """Deprecated v0.1 client of `AgentLightningServer`, with sync methods and `_async` twins.

    `poll_next_task` asks for a task every `poll_interval` seconds until one is available (or, with
    `max_polls`, gives up and returns None); connection problems while polling are logged and retried.
    `get_*_resources*` return None for unknown ids. `timeout` bounds each HTTP request.
    """

    def __init__(self, endpoint: str, poll_interval: float = 5.0, timeout: float = 10.0) -> None:
        self._warn_deprecated()
        if poll_interval <= 0:
            raise ValueError(f"poll_interval must be > 0 seconds, got {poll_interval}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.endpoint = endpoint.rstrip("/")
        self.poll_interval = poll_interval
        self.timeout = timeout

    def _warn_deprecated(self) -> None:
        warn_deprecated_once(
            "AgentLightningClient",
            "AgentLightningClient is the deprecated v0.1 API; use agentlightning.LightningStoreClient with "
            "LitAgentRunner instead",
            stacklevel=4,
        )

    def _url(self, path: str) -> str:
        return f"{self.endpoint}{path}"

    def _log_poll_error(self, exc: Exception) -> None:
        logger.warning("polling %s for a task failed (%s); retrying in %ss", self.endpoint, exc, self.poll_interval)

    # ---- async ----

    async def poll_next_task_async(self, *, max_polls: Optional[int] = None) -> Optional[Task]:
        """The next task; waits for one (forever unless `max_polls` is given, then None when none came)."""
        polls = 0
        async with httpx.AsyncClient(timeout=self.timeout) as http:
            while True:
                try:
                    task = _task_from(await http.get(self._url("/task")))
                except (httpx.HTTPError, ValueError) as exc:
                    self._log_poll_error(exc)
                    task = None
                if task is not None:
                    return task
                polls += 1
                if max_polls is not None and polls >= max_polls:
                    return None
                await asyncio.sleep(self.poll_interval)

    async def get_resources_by_id_async(self, resource_id: str) -> Optional[ResourcesUpdate]:
        async with httpx.AsyncClient(timeout=self.timeout) as http:
            return _resources_from(await http.get(self._url(f"/resources/{resource_id}")))

    async def get_latest_resources_async(self) -> Optional[ResourcesUpdate]:
        async with httpx.AsyncClient(timeout=self.timeout) as http:
            return _resources_from(await http.get(self._url("/resources/latest")))

    async def post_rollout_async(self, rollout: RolloutLegacy) -> GenericResponse:
        async with httpx.AsyncClient(timeout=self.timeout) as http:
            return _generic_from(
                await http.post(self._url("/rollout"), content=rollout.model_dump_json(), headers=_JSON)
            )

    # ---- sync ----

    def poll_next_task(self, *, max_polls: Optional[int] = None) -> Optional[Task]:
        """The next task; waits for one (forever unless `max_polls` is given, then None when none came)."""
        polls = 0
        with httpx.Client(timeout=self.timeout) as http:
            while True:
                try:
                    task = _task_from(http.get(self._url("/task")))
                except (httpx.HTTPError, ValueError) as exc:
                    self._log_poll_error(exc)
                    task = None
                if task is not None:
                    return task
                polls += 1
                if max_polls is not None and polls >= max_polls:
                    return None
                time.sleep(self.poll_interval)

    def get_resources_by_id(self, resource_id: str) -> Optional[ResourcesUpdate]:
        with httpx.Client(timeout=self.timeout) as http:
            return _resources_from(http.get(self._url(f"/resources/{resource_id}")))

    def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        with httpx.Client(timeout=self.timeout) as http:
            return _resources_from(http.get(self._url("/resources/latest")))

    def post_rollout(self, rollout: RolloutLegacy) -> GenericResponse:
        with httpx.Client(timeout=self.timeout) as http:
            return _generic_from(http.post(self._url("/rollout"), content=rollout.model_dump_json(), headers=_JSON))


class DevTaskLoader(AgentLightningClient):
    """Deprecated in-process stand-in for a server: serves `tasks` in a cycle with fixed `resources`.

    Plain inputs become tasks with fresh rollout ids; `Task` objects are served as they are. Posted
    rollouts are kept in `rollouts`. Use with `Trainer(dev=True).fit_v0(agent, url, dev_backend=loader)`
    or a `LegacyAgentRunner` with `max_tasks` (the cycle never ends by itself).
    """

    def __init__(
        self,
        tasks: Sequence[Union[TaskInput, Task]],
        resources: Union[NamedResources, ResourcesUpdate],
        **kwargs: float,
    ) -> None:
        super().__init__(endpoint="local://dev-task-loader", **kwargs)
        if len(tasks) == 0:
            raise ValueError("DevTaskLoader needs at least one task; pass a non-empty list of inputs or Tasks")
        now = time.time()
        if isinstance(resources, ResourcesUpdate):
            self._resources = resources
        else:
            self._resources = ResourcesUpdate(
                resources_id="rs-dev", create_time=now, update_time=now, version=1, resources=resources
            )
        self._tasks = list(tasks)
        self._served = 0
        self._rollouts: list[RolloutLegacy] = []

    def _warn_deprecated(self) -> None:
        warn_deprecated_once(
            "DevTaskLoader",
            "DevTaskLoader is the deprecated v0.1 API; use Trainer.dev(agent, dataset) or LitAgentRunner.step() "
            "instead",
            stacklevel=5,
        )

    @property
    def rollouts(self) -> list[RolloutLegacy]:
        """Rollouts posted so far, oldest first."""
        return list(self._rollouts)

    def poll_next_task(self, *, max_polls: Optional[int] = None) -> Optional[Task]:
        item = self._tasks[self._served % len(self._tasks)]
        self._served += 1
        if isinstance(item, Task):
            return item
        return Task(
            rollout_id=f"ro-dev-{self._served:04d}",
            input=item,
            resources_id=self._resources.resources_id,
            create_time=time.time(),
            num_claims=1,
        )

    def get_resources_by_id(self, resource_id: str) -> Optional[ResourcesUpdate]:
        return self._resources if resource_id == self._resources.resources_id else None

    def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        return self._resources

    def post_rollout(self, rollout: RolloutLegacy) -> GenericResponse:
        self._rollouts.append(rollout)
        return GenericResponse(message=f"rollout {rollout.rollout_id} received")

    async def poll_next_task_async(self, *, max_polls: Optional[int] = None) -> Optional[Task]:
        return self.poll_next_task(max_polls=max_polls)

    async def get_resources_by_id_async(self, resource_id: str) -> Optional[ResourcesUpdate]:
        return self.get_resources_by_id(resource_id)

    async def get_latest_resources_async(self) -> Optional[ResourcesUpdate]:
        return self.get_latest_resources()

    async def post_rollout_async(self, rollout: RolloutLegacy) -> GenericResponse:
        return self.post_rollout(rollout)
