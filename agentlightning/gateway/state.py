"""What the gateway app serves with, shared by its agent routes and its operator routes."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Optional

from starlette.responses import JSONResponse

from agentlightning.llm_proxy.runtime import ProxyRuntime
from agentlightning.web.pause import PauseGate

from .attempts import AttemptDirectory
from .config import GatewayConfig
from .keys import bearer_token
from .models import ModelRegistry

__all__ = ["GatewayState", "is_admin", "paused_response", "unauthorized_response"]


class GatewayState:
    """What the app serves with: config, secrets, the attempt directory, the proxy runtime (client, exporter),
    the registered model endpoints and the pause gate."""

    def __init__(
        self,
        config: GatewayConfig,
        secret: str,
        directory: AttemptDirectory,
        runtime: ProxyRuntime,
        *,
        admin_key: Optional[str] = None,
        registry: Optional[ModelRegistry] = None,
        gate: Optional[PauseGate] = None,
    ) -> None:
        self.config = config
        self.secret = secret
        self.admin_key = admin_key or secret
        self.directory = directory
        self.runtime = runtime
        self.registry = registry if registry is not None else ModelRegistry(config.upstream_api_key)
        self.gate = gate if gate is not None else PauseGate(5.0)


def paused_response(gate: PauseGate) -> JSONResponse:
    """v1.0's answer to a call while paused: 429, `Retry-After`, `X-Agl-Paused: true`."""
    return JSONResponse(
        {"error": "gateway paused", "reason": gate.reason},
        status_code=429,
        headers={"Retry-After": gate.retry_after_header(), "X-Agl-Paused": "true"},
    )


def is_admin(state: GatewayState, headers: Mapping[str, str]) -> bool:
    """Whether a request carries the admin key (`Authorization: Bearer` or v1.0's `x-api-key`)."""
    token = bearer_token(headers) or headers.get("x-api-key")
    return bool(token) and hmac.compare_digest(str(token), state.admin_key)


def unauthorized_response() -> JSONResponse:
    """The 401 of the operator routes."""
    return JSONResponse(
        {"detail": "Invalid or missing API key: send the gateway's admin key as Bearer token or x-api-key"},
        status_code=401,
    )
