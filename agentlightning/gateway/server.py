"""`Gateway`: serves rollout-scoped model URLs and the events API for harnessed agents, over any store.

Agents get three values (see `ProcessAgent`): a base URL `.../proxy/rollout/{rid}/attempt/{aid}/mode/
{mode}/openai/v1` for any OpenAI client, an events URL, and a bearer key for both. Everything they send
lands in the store as spans of their attempt; the gateway itself keeps no state beyond caches, so with a
durable store (SQLite, PostgreSQL, or a store server in front of one) a restart loses nothing that was
acknowledged, and keys stay valid across restarts when the secret is kept (`AGL_GATEWAY_SECRET`).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Literal, Optional

from agentlightning.llm_proxy.models import ModelRouter
from agentlightning.llm_proxy.runtime import ProxyRuntime
from agentlightning.web.launcher import PythonServerLauncher, PythonServerLauncherArgs
from agentlightning.web.pause import PauseGate

from .app import EVENTS_PATH, HEALTH_PATH, PROXY_PREFIX, build_gateway_app
from .attempts import AttemptDirectory
from .config import GATEWAY_MODES, GatewayConfig
from .keys import attempt_key, new_secret
from .models import ModelEndpoint, ModelRegistry
from .recording import GatewaySpanRecorder
from .state import GatewayState

if TYPE_CHECKING:
    from agentlightning.store.base import LightningStore

__all__ = ["Gateway", "GATEWAY_SECRET_ENV", "GATEWAY_ADMIN_KEY_ENV"]

logger = logging.getLogger(__name__)

GATEWAY_SECRET_ENV = "AGL_GATEWAY_SECRET"
"""Environment variable holding the secret attempt keys derive from (random per gateway when unset)."""

GATEWAY_ADMIN_KEY_ENV = "AGL_GATEWAY_ADMIN_KEY"
"""Environment variable holding the key of the operator routes (default: the secret itself)."""

GatewayLaunchMode = Literal["thread", "asyncio"]


class Gateway:
    """The harness gateway: rollout-scoped OpenAI endpoints plus the events API, writing to `store`.

    Args:
        store: where spans go; any backend (in `thread` mode it is called from the gateway's thread).
        config: upstreams and per-mode request policy (`GatewayConfig()` by default).
        secret: signs attempt keys; default `$AGL_GATEWAY_SECRET`, else a random one.
        admin_key: key of the operator routes (`/proxy/pause|resume|state`, `/api/models`, `/api/rollouts`);
            default `$AGL_GATEWAY_ADMIN_KEY`, else `secret`.
        host / port: where to listen (127.0.0.1, a free port).
        access_host: host put in URLs handed to agents (default: `host`, or 127.0.0.1 for 0.0.0.0).
        launch_mode: `thread` (own event loop in a background thread) or `asyncio` (the caller's loop).
    """

    def __init__(
        self,
        store: LightningStore,
        config: Optional[GatewayConfig] = None,
        *,
        secret: Optional[str] = None,
        admin_key: Optional[str] = None,
        host: Optional[str] = None,
        port: Optional[int] = None,
        access_host: Optional[str] = None,
        launch_mode: GatewayLaunchMode = "thread",
    ) -> None:
        if launch_mode not in ("thread", "asyncio"):
            raise ValueError(f"launch_mode must be 'thread' or 'asyncio', got {launch_mode!r}")
        self.store = store
        self.config = config or GatewayConfig()
        self.secret = secret or os.environ.get(GATEWAY_SECRET_ENV) or new_secret()
        self.admin_key = admin_key or os.environ.get(GATEWAY_ADMIN_KEY_ENV) or self.secret
        self.gate = PauseGate(5.0)
        """New calls are held (429 + Retry-After) while paused; see `pause` and `link_pause`."""
        self.registry = ModelRegistry(self.config.upstream_api_key)
        """Endpoints registered at `/api/models` (or with `register_models`)."""
        self.host = host or "127.0.0.1"
        self.port = port
        self.access_host = access_host
        self.launch_mode: GatewayLaunchMode = launch_mode
        self.directory = AttemptDirectory(store, self.config)  # validates the upstreams now
        self._launcher: Optional[PythonServerLauncher] = None

    def _state(self) -> GatewayState:
        runtime = ProxyRuntime(
            ModelRouter([]),
            self.store,
            middlewares=[],
            callbacks=[GatewaySpanRecorder()],
            num_retries=self.config.num_retries,
            request_timeout=self.config.request_timeout,
            retry_status_codes=self.config.retry_status_codes,
        )
        return GatewayState(
            self.config,
            self.secret,
            self.directory,
            runtime,
            admin_key=self.admin_key,
            registry=self.registry,
            gate=self.gate,
        )

    async def start(self) -> None:
        """Start serving; returns once the gateway answers its health check."""
        if self.is_running():
            raise RuntimeError(f"the gateway is already running at {self.endpoint}")
        args = PythonServerLauncherArgs(
            port=self.port,
            host=self.host,
            access_host=self.access_host,
            launch_mode=self.launch_mode,
            healthcheck_url=HEALTH_PATH,
            log_level=logging.WARNING,
        )
        launcher = PythonServerLauncher(build_gateway_app(self._state()), args)
        await launcher.start()
        self._launcher = launcher
        self.port = launcher.port
        logger.info("gateway serving at %s (store %s)", self.endpoint, type(self.store).__name__)

    async def stop(self) -> None:
        """Stop serving (spans of finished calls are flushed first). Idempotent."""
        launcher, self._launcher = self._launcher, None
        if launcher is not None:
            await launcher.stop()

    async def run_forever(self) -> None:
        """Serve until cancelled (for `agl gateway`)."""
        if self._launcher is None:
            await self.start()
        assert self._launcher is not None
        await self._launcher.run_forever()

    def is_running(self) -> bool:
        return self._launcher is not None and self._launcher.is_running()

    # ---- operator side (also over HTTP, see admin.py) ----

    def pause(self, reason: Optional[str] = None, retry_after_seconds: Optional[float] = None) -> None:
        """Hold new model calls (429 + `Retry-After`) until `resume()`; admitted calls finish."""
        self.gate.pause(reason, retry_after_seconds)

    def resume(self) -> None:
        self.gate.resume()

    def drain(self, timeout: Optional[float] = None) -> float:
        """Wait until no admitted model call is running; returns the seconds waited."""
        return self.gate.drain(timeout)

    def link_pause(self, gate: PauseGate) -> None:
        """Pause together with another gate, e.g. `gateway.link_pause(policy_server.gate)`: the policy
        server's weight swap then holds the gateway's new calls, and `POST /proxy/pause` holds the server."""
        self.gate.link(gate)

    def register_models(self, endpoints: list[ModelEndpoint]) -> None:
        """Route calls to these endpoints (like `POST /api/models`)."""
        self.registry.register(endpoints)

    # ---- what agents are handed ----

    @property
    def endpoint(self) -> str:
        """Root URL, e.g. `http://127.0.0.1:4750` (known once started)."""
        if self._launcher is None:
            raise RuntimeError("the gateway picks its port on start(); start() it first")
        return self._launcher.access_endpoint

    def key(self, rollout_id: str, attempt_id: str) -> str:
        """The bearer key of one rollout attempt."""
        return attempt_key(self.secret, rollout_id, attempt_id)

    def openai_base_url(self, rollout_id: str, attempt_id: str, mode: str) -> str:
        """The attempt's OpenAI-compatible base URL (ends in `/openai/v1`)."""
        return rollout_urls(self.endpoint, rollout_id, attempt_id, mode)[0]

    def event_url(self, rollout_id: str, attempt_id: str) -> str:
        """Where the attempt posts its events."""
        return rollout_urls(self.endpoint, rollout_id, attempt_id, "train")[1]


def rollout_urls(endpoint: str, rollout_id: str, attempt_id: str, mode: str) -> tuple[str, str]:
    """(OpenAI base URL, events URL) of a rollout attempt on the gateway at `endpoint`."""
    if mode not in GATEWAY_MODES:
        raise ValueError(f"mode must be one of {GATEWAY_MODES}, got {mode!r}")
    root = endpoint.rstrip("/")
    ids = {"rollout_id": rollout_id, "attempt_id": attempt_id}
    return root + PROXY_PREFIX.format(mode=mode, **ids), root + EVENTS_PATH.format(**ids)
