"""Model endpoints registered with the gateway at runtime (`POST/DELETE /api/models`), with their versions.

A trainer that starts or restarts its inference servers (vLLM replicas, a policy server) tells the gateway
where they are: `[{"model": name, "endpoint": "http://host:8000/v1", "version": 3}]`. While any endpoint is
registered, calls go to the endpoints registered under the model they are sent as (`GatewayConfig.model_name`
or the agent's), a rollout pinned to one of them by a hash of its id; the endpoint's version is recorded on
each call's span. The registry lives in the gateway's memory, like v1.0's: a restarted gateway starts
empty, and trainers re-register at every rollout phase.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentlightning.llm_proxy.models import ModelRouter

from .attempts import pin_replica

__all__ = ["ModelEndpoint", "ModelRegistry", "RegisteredUpstream"]


class ModelEndpoint(BaseModel):
    """One registered endpoint: the model name it serves, its OpenAI base URL (with `/v1`) and a version."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    endpoint: str = Field(min_length=1)
    version: int = 0

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"endpoint must be an http(s) URL such as http://host:8000/v1, got {value!r}")
        return value.rstrip("/")


@dataclass(frozen=True)
class RegisteredUpstream:
    """The endpoint a call goes to, with a router to reach it."""

    entry: ModelEndpoint
    router: ModelRouter


def _router(endpoint: str, api_key: Optional[str]) -> ModelRouter:
    params: dict[str, Any] = {"model": "openai/*", "api_base": endpoint}
    if api_key:
        params["api_key"] = api_key
    return ModelRouter([{"model_name": "*", "litellm_params": params}])  # type: ignore[list-item]


class ModelRegistry:
    """Registered endpoints keyed by (model, endpoint); a repeat registration replaces the old one."""

    def __init__(self, api_key: Optional[str] = None) -> None:
        self.api_key = api_key
        self._entries: dict[tuple[str, str], RegisteredUpstream] = {}

    def __bool__(self) -> bool:
        return bool(self._entries)

    def register(self, entries: list[ModelEndpoint]) -> None:
        for entry in entries:
            self._entries[(entry.model, entry.endpoint)] = RegisteredUpstream(
                entry, _router(entry.endpoint, self.api_key)
            )

    def clear(self) -> None:
        self._entries.clear()

    def entries(self) -> list[ModelEndpoint]:
        return [registered.entry for _, registered in sorted(self._entries.items())]

    def names(self) -> list[str]:
        return sorted({model for model, _ in self._entries})

    def pick(self, model: str, rollout_id: str) -> Optional[RegisteredUpstream]:
        """The endpoint of `model` that `rollout_id` is pinned to (stable while the set is unchanged)."""
        candidates = [registered for (name, _), registered in sorted(self._entries.items()) if name == model]
        if not candidates:
            return None
        return candidates[pin_replica(rollout_id, len(candidates))]
