"""Deprecated v0.1 clients: `AgentLightningClient` talks to an `AgentLightningServer`; `DevTaskLoader` fakes one.

Superseded by `LightningStoreClient` (and `LitAgentRunner`, which pulls rollouts from any store).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, Optional, Union

import httpx

from agentlightning.types import NamedResources, ResourcesUpdate, RolloutLegacy, Task, TaskIfAny
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
    response.raise_for_status()
    return ResourcesUpdate.model_validate(response.json())


def _json_from(response: httpx.Response) -> Optional[dict[str, Any]]:
    response.raise_for_status()
    answer = response.json()
    return answer if isinstance(answer, dict) else None


_REQUEST_ERRORS = (httpx.HTTPError, ValueError)


def _none_on_error(what: str, url: str, exc: Exception) -> None:
    logger.debug("%s %s failed: %s", what, url, exc)


class AgentLightningClient:
    """Deprecated v0.1 client of `AgentLightningServer`, with sync methods and `_async` twins.

    `poll_next_task` asks for a task every `poll_interval` seconds until one is available (or, with
    `max_polls`, gives up and returns None); connection problems while polling are logged and retried.
    As in v0.3, `get_*_resources*` and `post_rollout*` return None when the request fails (unknown id,
    server error, no connection); `post_rollout*` otherwise returns the server's JSON answer
    (`{"status": "success", "message": ...}`). `timeout` bounds each HTTP request.
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

    async def _get_async(self, path: str) -> Optional[ResourcesUpdate]:
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as http:
                return _resources_from(await http.get(self._url(path)))
        except _REQUEST_ERRORS as exc:
            _none_on_error("GET", self._url(path), exc)
            return None

    async def get_resources_by_id_async(self, resource_id: str) -> Optional[ResourcesUpdate]:
        return await self._get_async(f"/resources/{resource_id}")

    async def get_latest_resources_async(self) -> Optional[ResourcesUpdate]:
        return await self._get_async("/resources/latest")

    async def post_rollout_async(self, rollout: RolloutLegacy) -> Optional[dict[str, Any]]:
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as http:
                return _json_from(
                    await http.post(self._url("/rollout"), content=rollout.model_dump_json(), headers=_JSON)
                )
        except _REQUEST_ERRORS as exc:
            _none_on_error("POST", self._url("/rollout"), exc)
            return None

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

    def _get(self, path: str) -> Optional[ResourcesUpdate]:
        try:
            with httpx.Client(timeout=self.timeout) as http:
                return _resources_from(http.get(self._url(path)))
        except _REQUEST_ERRORS as exc:
            _none_on_error("GET", self._url(path), exc)
            return None

    def get_resources_by_id(self, resource_id: str) -> Optional[ResourcesUpdate]:
        return self._get(f"/resources/{resource_id}")

    def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        return self._get("/resources/latest")

    def post_rollout(self, rollout: RolloutLegacy) -> Optional[dict[str, Any]]:
        try:
            with httpx.Client(timeout=self.timeout) as http:
                return _json_from(http.post(self._url("/rollout"), content=rollout.model_dump_json(), headers=_JSON))
        except _REQUEST_ERRORS as exc:
            _none_on_error("POST", self._url("/rollout"), exc)
            return None


class DevTaskLoader(AgentLightningClient):
    """Deprecated in-process stand-in for a server: serves `tasks` in a cycle with fixed `resources`.

    As in v0.3, plain inputs become tasks named by their place in the list (`local_task_001`, ...), the
    resources are `"local"` unless a `ResourcesUpdate` is given, asking for other resources raises
    `ValueError`, and `post_rollout` answers `{"status": "received", "rollout_id": ...}`. `Task` objects are
    served as they are. Posted rollouts are kept in `rollouts`. Use with `Trainer(dev=True).fit_v0(agent, url, dev_data=loader)`
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
                resources_id="local", create_time=now, update_time=now, version=1, resources=resources
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
        index = self._served % len(self._tasks)
        item = self._tasks[index]
        self._served += 1
        if isinstance(item, Task):
            return item
        return Task(
            rollout_id=f"local_task_{index + 1:03d}",
            input=item,
            resources_id=self._resources.resources_id,
            create_time=time.time(),
            num_claims=1,
        )

    def get_resources_by_id(self, resource_id: str) -> Optional[ResourcesUpdate]:
        if resource_id != self._resources.resources_id:
            raise ValueError(
                f"resources {resource_id!r} not found; this DevTaskLoader only has {self._resources.resources_id!r}"
            )
        return self._resources

    def get_latest_resources(self) -> Optional[ResourcesUpdate]:
        return self._resources

    def post_rollout(self, rollout: RolloutLegacy) -> Optional[dict[str, Any]]:
        self._rollouts.append(rollout)
        return {"status": "received", "rollout_id": rollout.rollout_id}

    async def poll_next_task_async(self, *, max_polls: Optional[int] = None) -> Optional[Task]:
        return self.poll_next_task(max_polls=max_polls)

    async def get_resources_by_id_async(self, resource_id: str) -> Optional[ResourcesUpdate]:
        return self.get_resources_by_id(resource_id)

    async def get_latest_resources_async(self) -> Optional[ResourcesUpdate]:
        return self.get_latest_resources()

    async def post_rollout_async(self, rollout: RolloutLegacy) -> Optional[dict[str, Any]]:
        return self.post_rollout(rollout)
