"""Which rollout attempt a request belongs to, whether it may still report, and where its calls go.

Every gateway request names a rollout and an attempt. `AttemptDirectory` answers from the store, following
its fencing: unknown rollout or attempt -> 404; an attempt that is no longer the rollout's latest, has
ended (succeeded / failed) or went stale (timeout / unresponsive) -> 409. The rollout is cached for a
moment; the attempt's status is read on every request, so nothing is accepted after the attempt ended. It also resolves the upstream model
server of the attempt: one of the configured replicas, pinned by a hash of the rollout id, or the
endpoint of the rollout's `LLM` resource.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from agentlightning.llm_proxy.models import Deployment, ModelRouter
from agentlightning.types import LLM, ProxyLLM, Rollout

from .config import GatewayConfig

if TYPE_CHECKING:
    from agentlightning.store.base import LightningStore

__all__ = ["AttemptDirectory", "GatewayError", "Upstream", "pin_replica"]

# Attempts that may not report any more: ended on their own, or given up by the store's watchdog (stale).
ENDED_ATTEMPT_STATUSES = ("succeeded", "failed", "timeout", "unresponsive")


class GatewayError(Exception):
    """A request the gateway refuses: HTTP `status_code` with a message naming the problem and the fix."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


@dataclass(frozen=True)
class Upstream:
    """Where the calls of one rollout go: a router over one replica, and the model to name by default."""

    router: ModelRouter
    api_base: str
    default_model: Optional[str]

    def deployment(self, model: str) -> Deployment:
        return self.router.resolve(model)[0]


def pin_replica(rollout_id: str, n_replicas: int) -> int:
    """The replica index of a rollout: stable across calls, processes and gateway restarts."""
    digest = hashlib.sha256(rollout_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % n_replicas


def _router(api_base: str, api_key: Optional[str]) -> ModelRouter:
    params: dict[str, object] = {"model": "openai/*", "api_base": api_base}
    if api_key:
        params["api_key"] = api_key
    return ModelRouter([{"model_name": "*", "litellm_params": params}])  # type: ignore[list-item]


class AttemptDirectory:
    """Checks rollout attempts against the store and resolves their upstreams."""

    def __init__(self, store: LightningStore, config: GatewayConfig) -> None:
        self.store = store
        self.config = config
        try:
            self._replicas = [_router(url, config.upstream_api_key) for url in config.upstreams]
        except ValueError as exc:
            raise ValueError(f"bad gateway upstream: {exc}") from None
        self._replica_bases = list(config.upstreams)
        self._rollouts: dict[str, tuple[float, Rollout]] = {}
        # Resources can be updated in place (same id, new version), so resolved upstreams expire too.
        self._resource_upstreams: dict[tuple[str, Optional[str]], tuple[float, Upstream]] = {}

    async def check(self, rollout_id: str, attempt_id: str) -> Rollout:
        """The rollout, if `attempt_id` is its latest attempt and still live; else a `GatewayError`.

        The rollout is reused for `attempt_cache_seconds`; the attempt is read from the store every time.
        """
        now = time.monotonic()
        cached = self._rollouts.get(rollout_id)
        if cached is not None and cached[0] > now:
            rollout = cached[1]
        else:
            found = await self.store.get_rollout_by_id(rollout_id)
            if found is None:
                raise GatewayError(404, f"rollout {rollout_id!r} not found; was it enqueued in this gateway's store?")
            rollout = found
            if len(self._rollouts) > 10_000:
                self._rollouts = {k: v for k, v in self._rollouts.items() if v[0] > now}
            self._rollouts[rollout_id] = (now + self.config.attempt_cache_seconds, rollout)
        latest = await self.store.get_latest_attempt(rollout_id)
        if latest is None or latest.attempt_id != attempt_id:
            attempts = await self.store.query_attempts(rollout_id)
            if all(a.attempt_id != attempt_id for a in attempts):
                raise GatewayError(404, f"attempt {attempt_id!r} of rollout {rollout_id!r} not found")
            current = latest.attempt_id if latest is not None else None
            raise GatewayError(
                409,
                f"attempt {attempt_id!r} of rollout {rollout_id!r} is stale: the rollout's latest attempt is "
                f"{current!r}; only the running attempt may report",
            )
        if latest.status in ENDED_ATTEMPT_STATUSES:
            raise GatewayError(
                409,
                f"attempt {attempt_id!r} of rollout {rollout_id!r} already ended ({latest.status}); "
                "events and LLM calls after the end are refused",
            )
        return rollout

    def forget(self, rollout_id: str, attempt_id: str) -> None:
        """Drop the cached rollout (e.g. once its attempt has ended)."""
        self._rollouts.pop(rollout_id, None)

    async def upstream(self, rollout: Rollout) -> Upstream:
        """The model server of `rollout`: its pinned replica, or its LLM resource's endpoint."""
        if self._replicas:
            index = pin_replica(rollout.rollout_id, len(self._replicas))
            return Upstream(self._replicas[index], self._replica_bases[index], None)
        cache_key = (rollout.resources_id or "", self.config.llm_resource)
        now = time.monotonic()
        found = self._resource_upstreams.get(cache_key) if rollout.resources_id else None
        if found is not None and found[0] > now:
            return found[1]
        update = (
            await self.store.get_resources_by_id(rollout.resources_id)
            if rollout.resources_id
            else await self.store.get_latest_resources()
        )
        resources = update.resources if update is not None else {}
        llm = self._pick_llm(rollout, resources)
        endpoint = llm.get_base_url() if isinstance(llm, ProxyLLM) else llm.endpoint
        try:
            router = _router(endpoint, self.config.upstream_api_key or llm.api_key)
        except ValueError as exc:
            raise GatewayError(502, f"the LLM resource of rollout {rollout.rollout_id!r} is unusable: {exc}") from None
        upstream = Upstream(router, endpoint, llm.model)
        if rollout.resources_id:
            if len(self._resource_upstreams) > 1_000:
                self._resource_upstreams = {k: v for k, v in self._resource_upstreams.items() if v[0] > now}
            self._resource_upstreams[cache_key] = (now + self.config.attempt_cache_seconds, upstream)
        return upstream

    def _pick_llm(self, rollout: Rollout, resources: Mapping[str, object]) -> LLM:
        name = self.config.llm_resource
        if name is not None:
            resource = resources.get(name)
            if not isinstance(resource, LLM):
                raise GatewayError(
                    502,
                    f"rollout {rollout.rollout_id!r} has no LLM resource named {name!r} (resources: "
                    f"{sorted(resources)}); publish one or start the gateway with upstreams",
                )
            return resource
        for resource in resources.values():
            if isinstance(resource, LLM):
                return resource
        raise GatewayError(
            502,
            f"rollout {rollout.rollout_id!r} runs without an LLM resource and the gateway has no upstreams; "
            "publish an LLM resource (e.g. initial_resources={'llm': LLM(endpoint=..., model=...)}) or pass upstreams",
        )
