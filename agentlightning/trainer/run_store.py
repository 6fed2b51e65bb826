"""The store as the algorithm of one `fit`/`dev` sees it: every rollout it creates is tagged with the run.

Several scripts can send their runs to one store (`agl store` and `AGL_STORE_URL`); the tag keeps them
apart: the run's runners dequeue only rollouts with its tag (`Runner.run`), the dashboard draws one reward
curve per run, and the ids remembered here let the run's progress lines and summary count this run's
rollouts only.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, Optional

from agentlightning.semconv import AGL_RUN
from agentlightning.store.base import LightningStore, LightningStoreCapabilities
from agentlightning.store.forwarding import ForwardingLightningStore
from agentlightning.types import EnqueueRolloutRequest, Rollout

__all__ = ["RUN_METADATA_KEY", "RunStore", "default_run_name"]

logger = logging.getLogger(__name__)

RUN_METADATA_KEY = AGL_RUN
"""Rollout metadata key naming the `fit`/`dev` run that created the rollout."""

_CREATING = ("enqueue_rollout", "start_rollout")


def default_run_name(now: Optional[float] = None) -> str:
    """`<script> <local start time>`, e.g. `quickstart.py 2026-11-27 10:04:31`."""
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return f"{script or 'python'} {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))}"


class RunStore(ForwardingLightningStore):
    """Forwards every call to `store`; rollouts created through it get `metadata["agl_run"] = run`.

    Anything else (`endpoint`, `server_address`, ...) is read from the wrapped store.
    """

    def __init__(self, store: LightningStore, run: str) -> None:
        self.store = store
        self.run = run
        self.rollout_ids: list[str] = []
        """Ids of the rollouts created through this store, in creation order."""

    def __getattr__(self, name: str) -> Any:
        if name == "store":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.store, name)

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return self.store.capabilities

    def otlp_traces_endpoint(self) -> str:
        return self.store.otlp_traces_endpoint()

    async def close(self) -> None:
        await self.store.close()

    async def close_loop_resources(self) -> None:
        await self.store.close_loop_resources()

    def _tagged(self, metadata: Optional[dict[str, Any]]) -> dict[str, Any]:
        return {**(metadata or {}), RUN_METADATA_KEY: self.run}

    async def _forward(self, method: str, arguments: dict[str, Any]) -> Any:
        if method in _CREATING:
            arguments["metadata"] = self._tagged(arguments.get("metadata"))
        elif method == "enqueue_many_rollouts":
            requests: Sequence[EnqueueRolloutRequest] = arguments["rollouts"]
            arguments["rollouts"] = [r.model_copy(update={"metadata": self._tagged(r.metadata)}) for r in requests]
        result = await getattr(self.store, method)(**arguments)
        if method in _CREATING:
            self.rollout_ids.append(result.rollout_id)
        elif method == "enqueue_many_rollouts":
            created: Sequence[Rollout] = result
            self.rollout_ids.extend(r.rollout_id for r in created)
        return result
