"""The one OpenAI-compatible app shell of `agl serve`: the echo server and the policy server both run in it.

`OpenAIServer` owns what the two share: the lifecycle (uvicorn on a background thread, `start`/`stop`,
`run_forever`, a context manager), the routes (`/health`, `/v1/models`, `/v1/chat/completions`,
`/v1/responses`, `/v1/messages`) and the hardening every server we ship gets (`web.hardening`: body size
limit, browser guard, validation answers naming the field). A subclass says how to answer a chat
(`serve_chat` for the chat route, `complete` for the translated APIs) and what its health and models are.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from ..web.background import BackgroundServer
from ..web.limits import DEFAULT_MAX_REQUEST_SIZE
from ..web.pause import PauseGate
from .protocol import ChatCompletionRequest

if TYPE_CHECKING:
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import Response

    from ..web.launcher import PythonServerLauncher

__all__ = ["OpenAIServer", "run_sync"]

logger = logging.getLogger(__name__)


def run_sync(coroutine: Any) -> Any:
    """Run a coroutine to completion from sync code, even when the calling thread has a running loop."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


class OpenAIServer(BackgroundServer):
    """An OpenAI-compatible server on a background thread (see the module docstring).

    Args:
        host/port: where to bind; port None or 0 picks a free port.
        max_body_size: largest request body, in bytes; larger ones are answered 413.
        allowed_hosts: `Host` names accepted besides IP addresses, localhost and this machine's name
            (`"*"`: any); others are refused 403 (a web page using DNS rebinding).
        allowed_origins: web origins whose pages may call the server (`"*"`: any).
    """

    kind = "OpenAI-compatible server"

    def __init__(
        self,
        *,
        model_name: str,
        host: str = "127.0.0.1",
        port: Optional[int] = None,
        retry_after_s: float = 1.0,
        max_body_size: int = DEFAULT_MAX_REQUEST_SIZE,
        allowed_hosts: Sequence[str] = (),
        allowed_origins: Sequence[str] = (),
    ) -> None:
        if max_body_size <= 0:
            raise ValueError(f"max_body_size must be a positive number of bytes, got {max_body_size}")
        self.model_name = model_name
        self.host = host
        self.max_body_size = max_body_size
        self.allowed_hosts = tuple(allowed_hosts)
        self.allowed_origins = tuple(allowed_origins)
        self.gate = PauseGate(retry_after_s)
        """Pause flag and in-flight count of model requests (link a gateway's gate to hold its calls too)."""
        self._requested_port = port or None
        self._launcher: Optional[PythonServerLauncher] = None
        self._app: Optional[FastAPI] = None

    # What a server answers ---------------------------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        return {"status": "ok", "model": self.model_name}

    @property
    def served_models(self) -> List[str]:
        """The model names requests may select."""
        return [self.model_name]

    async def admit(self) -> bool:
        """Count a new model request in (False: refuse it with 429, the server is paused)."""
        return self.gate.enter()

    def paused_message(self) -> str:
        return f"the {self.kind} is paused; retry shortly"

    async def serve_chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        """The whole answer to `POST /v1/chat/completions` (admission included)."""
        raise NotImplementedError

    async def complete(self, body: ChatCompletionRequest, request: Request) -> Dict[str, Any]:
        """The chat-completions dict for an admitted, non-streamed request of another API.

        Raises:
            ValueError: the request cannot be answered as asked (400).
        """
        raise NotImplementedError

    # Lifecycle ---------------------------------------------------------------------------------------

    @property
    def app(self) -> FastAPI:
        if self._app is None:
            self._app = build_openai_app(self)
        return self._app

    @property
    def endpoint(self) -> str:
        """The OpenAI base URL, e.g. `http://127.0.0.1:8000/v1` (valid once started)."""
        if self._launcher is None or self._launcher.port is None:
            raise RuntimeError(f"the {self.kind} has no port yet; call start() first")
        return f"{self._launcher.access_endpoint}/v1"

    @property
    def port(self) -> Optional[int]:
        """The bound port once started (the requested one before)."""
        return self._launcher.port if self._launcher is not None else self._requested_port

    def start(self) -> None:
        """Start serving (uvicorn on a background thread); returns once the server answers its health check."""
        run_sync(self.astart())

    def stop(self) -> None:
        run_sync(self.astop())

    def _starting(self) -> None:
        """Called before the HTTP server starts (the policy server starts its engine)."""

    def _stopped(self) -> None:
        """Called after the HTTP server stopped, or failed to start."""

    async def astart(self) -> None:
        """`start()` for callers inside an event loop."""
        from ..web.launcher import PythonServerLauncher, PythonServerLauncherArgs

        if self._launcher is not None and self._launcher.is_running():
            return
        self._starting()
        args = PythonServerLauncherArgs(
            host=self.host, port=self._requested_port, launch_mode="thread", healthcheck_url="/health"
        )
        self._launcher = PythonServerLauncher(self.app, args)
        try:
            await self._launcher.start()
        except Exception:
            await asyncio.to_thread(self._stopped)
            raise
        logger.info("%s %r listening on %s", self.kind, self.model_name, self.endpoint)

    async def astop(self) -> None:
        """`stop()` for callers inside an event loop."""
        if self._launcher is not None:
            await self._launcher.stop()
        await asyncio.to_thread(self._stopped)


def build_openai_app(server: OpenAIServer) -> FastAPI:
    """The app of `server`: health, models, chat completions, Responses and Messages, hardened."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response

    from ..web.hardening import harden, install_validation_answers
    from .apis import add_api_routes

    app = FastAPI(title=f"agentlightning {server.kind}")
    install_validation_answers(app)

    async def health(_request: Request) -> Response:
        return JSONResponse(server.health())

    async def models(_request: Request) -> Response:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "agentlightning"} for name in server.served_models
        ]
        return JSONResponse({"object": "list", "data": data})

    async def chat(body: ChatCompletionRequest, request: Request) -> Response:
        return await server.serve_chat(body, request)

    def typed(handler: Any, **annotations: Any) -> Any:
        # FastAPI reads annotations as strings in this module's globals, where the lazily imported names are not.
        handler.__annotations__ = {**annotations, "return": Response}
        return handler

    for path in ("/health", "/v1/health"):
        app.add_api_route(path, typed(health, _request=Request), methods=["GET"], include_in_schema=False)
    app.add_api_route("/v1/models", typed(models, _request=Request), methods=["GET"])
    chat_handler = typed(chat, body=ChatCompletionRequest, request=Request)
    app.add_api_route("/v1/chat/completions", chat_handler, methods=["POST"], response_model=None)
    add_api_routes(app, server)
    harden(
        app,
        max_body_size=server.max_body_size,
        allowed_hosts=(*server.allowed_hosts, server.host),  # the name it binds is one of its names
        allowed_origins=server.allowed_origins,
        size_hint="raise it with `agl serve --max-body-size`",
        host_hint="`agl serve --allowed-host NAME` (allowed_hosts=[...])",
        origin_hint="`agl serve --allowed-origin ORIGIN` (allowed_origins=[...])",
    )
    return app
