"""`LLMProxy`: an OpenAI-compatible endpoint in front of one or more model servers, recording every call.

Agents call `http://host:port/rollout/{rollout_id}/attempt/{attempt_id}/v1/chat/completions` (what
`as_resource(...)` / `ProxyLLM.get_base_url(...)` hand out); the proxy forwards to the backend serving
the requested model name, asks it for token ids (and logprobs when configured), relays the answer
(streamed or not) and writes the call's span (plus v0.3's `raw_gen_ai_request` child), with the rollout,
attempt and a sequence id, to the store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

from agentlightning.types import LLM, ProxyLLM
from agentlightning.web.body_limit import DEFAULT_MAX_REQUEST_SIZE
from agentlightning.web.launcher import LaunchMode, PythonServerLauncher, PythonServerLauncherArgs
from agentlightning.web.pause import PauseGate

from .app import HEALTH_PATH, build_proxy_app
from .callbacks import CallbackSpec, resolve_callbacks
from .middleware import MiddlewareSpec, resolve_middlewares
from .models import WILDCARD, ModelConfig, ModelRouter, litellm_available
from .runtime import DEFAULT_REQUEST_TIMEOUT_SECONDS, ProxyRuntime

if TYPE_CHECKING:
    from agentlightning.store.base import LightningStore

__all__ = ["LLMProxy", "get_active_llm_proxy", "set_active_llm_proxy", "PROXY_API_KEY"]

logger = logging.getLogger(__name__)

PROXY_API_KEY = "agentlightning-llm-proxy"
"""API key placed in resources handed out by the proxy; the proxy does not check keys."""

_SUPPORTED_LITELLM_SETTINGS = frozenset({"num_retries", "request_timeout"})

_active_proxy: Optional[LLMProxy] = None


def get_active_llm_proxy() -> Optional[LLMProxy]:
    """The proxy most recently started (or set active) in this process, if any."""
    return _active_proxy


def set_active_llm_proxy(proxy: Optional[LLMProxy]) -> None:
    """Make `proxy` the active one (None clears it)."""
    global _active_proxy
    _active_proxy = proxy


def _reachable_host(host: str) -> Optional[str]:
    """A host other machines can use when binding every interface (None to keep the launcher's default)."""
    if host not in ("0.0.0.0", "::", ""):
        return None
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None


class LLMProxy:
    """OpenAI-compatible proxy with per-rollout routing and span recording (SPEC section 10).

    Args:
        port: port to listen on; None picks a free one at the first `start()` (kept across restarts).
        model_list: LiteLLM-style `ModelConfig` entries, e.g. `{"model_name": "policy", "litellm_params":
            {"model": "hosted_vllm/Qwen/Qwen3-0.6B", "api_base": "http://127.0.0.1:8000/v1"}}`. OpenAI-compatible
            providers are forwarded directly; any other LiteLLM provider needs the `litellm` extra.
        store: where call spans go; in `mp` mode it must be reachable from another process (a started
            `LightningStoreServer`, a `LightningStoreClient`, or a SQLite/PostgreSQL store).
        host: interface to bind (default 127.0.0.1; "0.0.0.0" for agents on other machines).
        litellm_config: LiteLLM proxy config; `model_list` (when the argument is None) and
            `litellm_settings.num_retries` / `request_timeout` are honoured; with the `litellm` extra also the
            other `litellm_settings` (set on the `litellm` module), `router_settings.num_retries` / `timeout`
            and `environment_variables`. Other keys are ignored with a warning.
        num_retries: retries of a failed backend call (transport errors, 408/429/5xx), rotating deployments.
        num_workers: serving processes (`mp` only).
        launch_mode: "mp" (own process), "thread" (background thread of this process) or "asyncio" (the
            caller's event loop).
        launcher_args: full control over serving (overrides port/host/launch_mode/num_workers).
        middlewares: aliases `rollout_attempt` (default), `stream_conversion`, `message_inspection`, or instances.
        callbacks: aliases `return_token_ids`, `opentelemetry` (both default), `logprobs`, or instances.
        max_body_size: largest request body accepted, in bytes (default 32 MiB); larger ones get HTTP 413.
        allowed_hosts: `Host` names accepted besides IP addresses, localhost and this machine's name (`"*"`
            any); others get 403 (a web page using DNS rebinding).
        allowed_origins: web origins whose pages may call the proxy (`"*"` any); others get 403.
    """

    def __init__(
        self,
        port: Optional[int] = None,
        model_list: Optional[Sequence[ModelConfig]] = None,
        store: Optional[LightningStore] = None,
        host: Optional[str] = None,
        litellm_config: Optional[Mapping[str, Any]] = None,
        num_retries: int = 0,
        num_workers: int = 1,
        launch_mode: LaunchMode = "mp",
        launcher_args: Optional[PythonServerLauncherArgs] = None,
        middlewares: Optional[Sequence[MiddlewareSpec]] = None,
        callbacks: Optional[Sequence[CallbackSpec]] = None,
        max_body_size: int = DEFAULT_MAX_REQUEST_SIZE,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
    ) -> None:
        if max_body_size <= 0:
            raise ValueError(f"max_body_size must be a positive number of bytes, got {max_body_size}")
        self.max_body_size = max_body_size
        self.allowed_hosts = tuple(allowed_hosts)
        self.allowed_origins = tuple(allowed_origins)
        self.litellm_config: dict[str, Any] = dict(litellm_config or {})
        self.litellm_module_settings: dict[str, Any] = {}
        settings = self._litellm_settings()
        if model_list is None:
            model_list = list(self.litellm_config.get("model_list") or [])
        self.model_list: list[ModelConfig] = list(model_list)
        self._router = ModelRouter(self.model_list)
        self.port = port
        self.host = host
        self.num_retries = int(settings.get("num_retries", num_retries))
        if self.num_retries < 0:
            raise ValueError(f"num_retries must be >= 0, got {self.num_retries}")
        self.request_timeout = float(settings.get("request_timeout", DEFAULT_REQUEST_TIMEOUT_SECONDS))
        self.num_workers = num_workers
        self.launch_mode: LaunchMode = launcher_args.launch_mode if launcher_args is not None else launch_mode
        self.launcher_args = launcher_args
        self.middlewares = resolve_middlewares(middlewares)
        self.callbacks = resolve_callbacks(callbacks)
        self._store = store
        self.gate = PauseGate(1.0)
        """While paused, new calls wait (up to the request timeout) instead of reaching the backends; the
        VERL trainer pauses it while its vLLM replicas sleep. Only in `thread`/`asyncio` launch modes (an
        `mp` proxy serves from another process)."""
        self._runtime: Optional[ProxyRuntime] = None
        self._launcher: Optional[PythonServerLauncher] = None
        self._bound_port: Optional[int] = None
        self._server_args()  # validates launch mode / workers / port now rather than at start()

    def _litellm_settings(self) -> dict[str, Any]:
        """Our settings (retries, timeout) from `litellm_config`; with the LiteLLM extra, the other
        `litellm_settings` go to the `litellm` module of the serving process, `router_settings` retries and
        timeout are honoured and `environment_variables` are set (so provider keys reach LiteLLM)."""
        with_litellm = litellm_available()
        accepted = {"model_list", "litellm_settings"}
        settings = dict(self.litellm_config.get("litellm_settings") or {})
        if with_litellm:
            accepted |= {"router_settings", "environment_variables"}
            router = dict(self.litellm_config.get("router_settings") or {})
            if "num_retries" in router:
                settings.setdefault("num_retries", router["num_retries"])
            if "timeout" in router:
                settings.setdefault("request_timeout", router["timeout"])
            for name, value in dict(self.litellm_config.get("environment_variables") or {}).items():
                os.environ[str(name)] = str(value)
            self.litellm_module_settings = {k: v for k, v in settings.items() if k not in _SUPPORTED_LITELLM_SETTINGS}
        ignored = sorted(set(self.litellm_config) - accepted)
        if not with_litellm:
            ignored += [f"litellm_settings.{key}" for key in sorted(set(settings) - _SUPPORTED_LITELLM_SETTINGS)]
        if ignored:
            behind = "LiteLLM runs only the provider calls" if with_litellm else "no LiteLLM behind it"
            logger.warning("LLMProxy ignores these litellm_config entries (%s): %s", behind, ignored)
        return {k: v for k, v in settings.items() if k in _SUPPORTED_LITELLM_SETTINGS}

    # ---- store ----

    def get_store(self) -> Optional[LightningStore]:
        return self._store

    def set_store(self, store: Optional[LightningStore]) -> None:
        """Write spans to `store` from now on (an `mp` proxy that is running restarts to pick it up)."""
        self._store = store
        if not self.is_running():
            return
        if self.launch_mode == "mp":
            self._check_store()
            self._restart_blocking("store changed")
            return
        runtime = self._runtime
        assert runtime is not None
        runtime.store = store
        if store is None:
            runtime.exporter = None
        elif runtime.exporter is not None:
            runtime.exporter.store = store
        else:
            from .exporter import LightningSpanExporter

            runtime.exporter = LightningSpanExporter(store)

    # ---- model list ----

    def update_model_list(self, model_list: Sequence[ModelConfig]) -> None:
        """Serve `model_list` from now on (validated first; an `mp` proxy that is running restarts)."""
        router = ModelRouter(model_list)
        self.model_list = list(model_list)
        self._router = router
        logger.info("LLM proxy model list updated: %s", router.model_names)
        if not self.is_running():
            return
        if self.launch_mode == "mp":
            self._restart_blocking("model list changed")
        else:
            assert self._runtime is not None
            self._runtime.router = router

    def _restart_blocking(self, reason: str) -> None:
        """Restart an `mp` proxy from synchronous code (its processes do not depend on the caller's loop)."""
        logger.info("restarting the LLM proxy (%s)", reason)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                asyncio.run(self.restart())
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run, name="agl-llm-proxy-restart")
        thread.start()
        thread.join()
        if errors:
            raise errors[0]

    # ---- lifecycle ----

    def _server_args(self) -> PythonServerLauncherArgs:
        port = self._bound_port or self.port
        if self.launcher_args is not None:
            args = self.launcher_args
            if not args.port and port:
                args = dataclasses.replace(args, port=port)
        else:
            host = self.host or "127.0.0.1"
            args = PythonServerLauncherArgs(
                port=port,
                host=host,
                access_host=_reachable_host(host),
                launch_mode=self.launch_mode,
                n_workers=self.num_workers,
                log_level=logging.WARNING,
            )
        if args.healthcheck_url is None:
            args = dataclasses.replace(args, healthcheck_url=HEALTH_PATH)
        return args

    def _own_hosts(self) -> tuple[str, ...]:
        """`allowed_hosts` plus the names this proxy binds and is reached by (they are its own names)."""
        args = self._server_args()
        return tuple(name for name in (*self.allowed_hosts, args.host, args.access_host) if name)

    def _check_store(self) -> None:
        store = self._store
        if store is None:
            return
        if self.launch_mode == "mp":
            if not store.capabilities.get("zero_copy", False):
                raise ValueError(
                    f"launch_mode='mp' runs the proxy in another process, which cannot write to the "
                    f"{type(store).__name__} held in this one; pass a started LightningStoreServer, a "
                    "LightningStoreClient or a SQLite/PostgreSQL store, or use launch_mode='thread'"
                )
            endpoint_of = getattr(type(store), "endpoint", None)
            if isinstance(endpoint_of, property):
                try:
                    _ = store.endpoint  # type: ignore[attr-defined]
                except RuntimeError as exc:
                    raise ValueError(f"start the store server before the mp-mode LLM proxy: {exc}") from None
        elif self.launch_mode == "thread" and not store.capabilities.get("thread_safe", False):
            logger.warning(
                "the LLM proxy thread writes spans to %s, which is not thread-safe; use "
                "InMemoryLightningStore(thread_safe=True), LightningStoreThreaded or launch_mode='asyncio'",
                type(store).__name__,
            )

    def initialize(self) -> ProxyRuntime:
        """Build the serving state (model router, middlewares, callbacks, store) for the next `start()`.

        While running, the state being served is returned unchanged.
        """
        if self.is_running() and self._runtime is not None:
            return self._runtime
        self._check_store()
        self._runtime = ProxyRuntime(
            self._router,
            self._store,
            self.middlewares,
            self.callbacks,
            num_retries=self.num_retries,
            request_timeout=self.request_timeout,
            litellm_settings=self.litellm_module_settings,
            gate=self.gate if self.launch_mode != "mp" else None,
            hold_timeout=self.request_timeout,
        )
        return self._runtime

    async def start(self) -> None:
        """Start serving; returns once the proxy answers its health check."""
        if self.is_running():
            raise RuntimeError(f"the LLM proxy is already running at {self.endpoint}; stop() or restart() it")
        runtime = self.initialize()
        if not self.model_list:
            logger.warning("the LLM proxy starts with an empty model list; every call will fail until updated")
        launcher = PythonServerLauncher(
            build_proxy_app(runtime, self.max_body_size, self._own_hosts(), self.allowed_origins), self._server_args()
        )
        await launcher.start()
        self._launcher = launcher
        self._bound_port = launcher.port
        self.port = launcher.port
        set_active_llm_proxy(self)
        logger.info("LLM proxy serving %s at %s/v1", self._router.model_names, launcher.access_endpoint)

    async def stop(self) -> None:
        """Stop serving; spans of finished calls are flushed to the store first. Idempotent."""
        launcher, self._launcher = self._launcher, None
        if launcher is not None:
            await launcher.stop()
        if get_active_llm_proxy() is self:
            set_active_llm_proxy(None)

    async def restart(self) -> None:
        """Stop (if running) and start again on the same port."""
        await self.stop()
        await self.start()

    def is_running(self) -> bool:
        return self._launcher is not None and self._launcher.is_running()

    # ---- addresses and resources ----

    @property
    def endpoint(self) -> str:
        """Base URL without `/v1`, e.g. `http://127.0.0.1:12345` (known once a port is)."""
        port = self._bound_port or self.port
        if not port:
            raise RuntimeError("the LLM proxy picks its port on start(); start() it first or pass port=...")
        args = self._server_args()
        host = args.access_host or args.host or "127.0.0.1"
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def _default_model(self) -> str:
        names = [name for name in self._router.model_names if name != WILDCARD]
        if len(names) == 1:
            return names[0]
        if not names:
            raise ValueError("the LLM proxy serves no named model; pass model=... or update_model_list() first")
        raise ValueError(f"the LLM proxy serves several models {names}; pass model=... to as_resource()")

    def as_resource(
        self,
        rollout_id: Optional[str] = None,
        attempt_id: Optional[str] = None,
        model: Optional[str] = None,
        sampling_parameters: Optional[Mapping[str, Any]] = None,
    ) -> Union[ProxyLLM, LLM]:
        """The proxy as a resource: a `ProxyLLM` (routed per rollout by whoever uses it) without ids, or a
        plain `LLM` already routed to `/rollout/{rollout_id}/attempt/{attempt_id}/v1` with both."""
        if model is None:
            model = self._default_model()
        elif model not in self._router.model_names and WILDCARD not in self._router.model_names:
            raise ValueError(f"model {model!r} is not served by this proxy; known models: {self._router.model_names}")
        resource = ProxyLLM(
            endpoint=f"{self.endpoint}/v1",
            model=model,
            api_key=PROXY_API_KEY,
            sampling_parameters=dict(sampling_parameters or {}),
        )
        if rollout_id is None and attempt_id is None:
            return resource
        return LLM(
            endpoint=resource.get_base_url(rollout_id, attempt_id),
            model=model,
            api_key=PROXY_API_KEY,
            sampling_parameters=dict(sampling_parameters or {}),
        )

    def __repr__(self) -> str:
        where = self.endpoint if (self._bound_port or self.port) else "no port yet"
        return f"LLMProxy({where}, models={self._router.model_names}, launch_mode={self.launch_mode!r})"
