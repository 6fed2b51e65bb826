"""`GatewayConfig`: where the gateway forwards LLM calls and how it shapes them per rollout mode."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from agentlightning.llm_proxy.forward import RETRYABLE_STATUS_CODES
from agentlightning.web.body_limit import DEFAULT_MAX_REQUEST_SIZE

__all__ = ["GatewayConfig", "GATEWAY_RETRY_STATUS_CODES", "GATEWAY_MODES", "AUTO_MODEL"]

GATEWAY_MODES = ("train", "val")
"""Modes a rollout-scoped URL can name; `train` asks for logprobs and samples at the train temperature."""

AUTO_MODEL = "auto"
"""The model name v1.0-style agents send: "whatever the gateway serves"."""

GATEWAY_RETRY_STATUS_CODES = frozenset(RETRYABLE_STATUS_CODES | {409} | set(range(500, 600)))
"""Upstream answers retried with backoff: 408, 409, 429 and every 5xx."""


@dataclass(frozen=True)
class GatewayConfig:
    """How the gateway serves rollout-scoped OpenAI URLs.

    Args:
        upstreams: OpenAI-compatible base URLs (e.g. `http://127.0.0.1:8000/v1`) of the replicas of one
            model server. A rollout is pinned to one of them by a hash of its id. Empty: each rollout
            goes to the endpoint of the `LLM` resource it runs with (`llm_resource`, or the first one).
        upstream_api_key: bearer key sent upstream (None: the LLM resource's `api_key`, if any).
        model_name: the model every call is sent upstream as, replacing whatever the agent names (v1.0's
            agents all send `auto`); also the name registered endpoints are looked up under. None: the
            agent's model, except that `auto` (or no model) becomes the rollout's LLM resource model, or
            the only model registered at `/api/models`.
        llm_resource: name of the resource to read the endpoint from when `upstreams` is empty.
        train_temperature / val_temperature: temperature forced on every call of that mode (None leaves
            the agent's choice).
        train_logprobs: ask for logprobs of sampled tokens in train mode (what RL needs).
        num_retries: extra attempts on transport errors and on 408/409/429/5xx, with backoff.
        request_timeout: seconds an upstream may take to answer (streams: between two chunks).
        attempt_cache_seconds: how long a rollout (and the upstream read from its resources) is trusted
            before the store is asked again; the attempt's status is read on every request.
        max_body_size: largest request body accepted, in bytes (default 32 MiB); larger ones get HTTP 413
            before they are read.
    """

    upstreams: tuple[str, ...] = ()
    upstream_api_key: Optional[str] = field(default=None, repr=False)  # a secret: never in reprs or logs
    model_name: Optional[str] = None
    llm_resource: Optional[str] = None
    train_temperature: Optional[float] = 1.0
    val_temperature: Optional[float] = 0.7
    train_logprobs: bool = True
    num_retries: int = 3
    request_timeout: float = 600.0
    attempt_cache_seconds: float = 2.0
    retry_status_codes: frozenset[int] = field(default=GATEWAY_RETRY_STATUS_CODES)
    max_body_size: int = DEFAULT_MAX_REQUEST_SIZE

    def __post_init__(self) -> None:
        if isinstance(self.upstreams, str):  # type: ignore[unreachable]
            raise TypeError(f"upstreams must be a list of base URLs, got the string {self.upstreams!r}")
        object.__setattr__(self, "upstreams", tuple(self.upstreams))
        for name in ("train_temperature", "val_temperature"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise ValueError(f"{name} must be None or a number >= 0, got {value!r}")
        if self.model_name is not None and (not isinstance(self.model_name, str) or not self.model_name.strip()):
            raise ValueError(f"model_name must be None or a non-empty string, got {self.model_name!r}")
        if self.num_retries < 0:
            raise ValueError(f"num_retries must be >= 0, got {self.num_retries}")
        if self.request_timeout <= 0:
            raise ValueError(f"request_timeout must be > 0 seconds, got {self.request_timeout}")
        if self.max_body_size <= 0:
            raise ValueError(f"max_body_size must be a positive number of bytes, got {self.max_body_size}")
        if self.attempt_cache_seconds < 0:
            raise ValueError(f"attempt_cache_seconds must be >= 0, got {self.attempt_cache_seconds}")

    def temperature(self, mode: str) -> Optional[float]:
        """The temperature forced on calls of `mode`."""
        return self.train_temperature if mode == "train" else self.val_temperature
