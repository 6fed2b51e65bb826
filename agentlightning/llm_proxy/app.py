"""The proxy's ASGI app: OpenAI routes, plain and under `/rollout/{rollout_id}/attempt/{attempt_id}`.

`chat/completions` and `completions` are forwarded as they are; `responses` (OpenAI Responses API) and
`messages` (Anthropic Messages API) are translated to a chat completion for the backend (`translation`).

Hot-path routes are plain Starlette routes (no FastAPI body validation) to keep the added latency low.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentlightning.web.hardening import harden, parse_json_object
from agentlightning.web.limits import DEFAULT_MAX_REQUEST_SIZE

from .call import CallKind, ProxyCall
from .forward import ReleaseAtEnd, error_response, forward_call
from .models import WILDCARD, UnknownModelError
from .runtime import ProxyRuntime
from .spans import parse_traceparent
from .translation import TRANSLATED_APIS, ClientApi, TranslationError, client_error_response, request_to_chat

__all__ = ["build_proxy_app", "HEALTH_PATH", "ROUTE_PREFIXES"]

logger = logging.getLogger(__name__)

HEALTH_PATH = "/health"
ROLLOUT_PREFIX = "/rollout/{rollout_id}/attempt/{attempt_id}"
ROUTE_PREFIXES = ("", "/v1", ROLLOUT_PREFIX, ROLLOUT_PREFIX + "/v1")


async def _handle_call(runtime: ProxyRuntime, request: Request, client_api: ClientApi) -> Response:
    start_time = time.time()
    try:
        body = parse_json_object(await request.body())
    except ValueError as exc:
        return client_error_response(client_api, 400, str(exc), error_type="invalid_request_error")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return client_error_response(
            client_api,
            400,
            f"the request needs a 'model' (one of {runtime.router.model_names})",
            error_type="invalid_request_error",
            param="model",
        )
    try:
        deployments = runtime.router.resolve(model)
    except UnknownModelError as exc:
        return client_error_response(client_api, 404, str(exc), error_type="invalid_request_error", param="model")
    kind: CallKind = "completion" if client_api == "completion" else "chat"
    if client_api in TRANSLATED_APIS:
        try:
            backend_body = request_to_chat(client_api, body)
        except TranslationError as exc:
            return client_error_response(client_api, 400, str(exc), error_type="invalid_request_error")
    else:
        backend_body = dict(body)
    params = request.path_params
    call = ProxyCall(
        kind=kind,
        client_api=client_api,
        client_body=body,
        body=backend_body,
        headers=request.headers,
        start_time=start_time,
        path_rollout_id=params.get("rollout_id"),
        path_attempt_id=params.get("attempt_id"),
        client_stream=bool(body.get("stream")),
    )
    trace_parent = parse_traceparent(request.headers.get("traceparent"))
    if trace_parent is not None:
        call.trace_id, call.parent_span_id = trace_parent
    for middleware in runtime.middlewares:
        middleware.on_request(call, runtime)
    for callback in runtime.callbacks:
        callback.on_request(call, runtime)
    if call.convert_stream:
        call.body["stream"] = False
        call.body.pop("stream_options", None)
    gate = runtime.gate
    if gate is None:
        return await forward_call(runtime, call, deployments)
    if not await gate.enter_when_open(runtime.hold_timeout):
        message = f"the proxy has been paused for {runtime.hold_timeout:g} s ({gate.reason or 'weights changing'})"
        response = client_error_response(client_api, 429, message, error_type="rate_limit_error")
        response.headers["Retry-After"] = gate.retry_after_header()
        return response
    try:
        answer = await forward_call(runtime, call, deployments)
    except BaseException:
        gate.exit()
        raise
    return ReleaseAtEnd(answer, gate)


def build_proxy_app(
    runtime: ProxyRuntime,
    max_body_size: int = DEFAULT_MAX_REQUEST_SIZE,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
) -> FastAPI:
    """The proxy app serving `runtime`; the HTTP client and span exporter live in its lifespan.

    Hardened like every server we ship (`web.hardening`): request bodies over `max_body_size` bytes are
    answered 413; requests a web page made a browser send (an `Origin` other than `allowed_origins`, a
    `Host` other than an IP address, localhost, this machine's name or `allowed_hosts`) 403.
    """

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await runtime.startup()
        try:
            yield
        finally:
            await runtime.shutdown()

    app = FastAPI(title="agentlightning LLM proxy", lifespan=lifespan, docs_url=None, redoc_url=None)

    async def chat_completions(request: Request) -> Response:
        return await _handle_call(runtime, request, "chat")

    async def completions(request: Request) -> Response:
        return await _handle_call(runtime, request, "completion")

    async def responses(request: Request) -> Response:
        return await _handle_call(runtime, request, "responses")

    async def messages(request: Request) -> Response:
        return await _handle_call(runtime, request, "messages")

    async def models(request: Request) -> Response:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "agentlightning"}
            for name in runtime.router.model_names
            if name != WILDCARD
        ]
        return JSONResponse({"object": "list", "data": data})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    app.add_route(HEALTH_PATH, health, methods=["GET"], include_in_schema=False)
    for prefix in ROUTE_PREFIXES:
        app.add_route(prefix + "/chat/completions", chat_completions, methods=["POST"])
        app.add_route(prefix + "/completions", completions, methods=["POST"])
        app.add_route(prefix + "/responses", responses, methods=["POST"])
        app.add_route(prefix + "/messages", messages, methods=["POST"])
        app.add_route(prefix + "/models", models, methods=["GET"])

    @app.exception_handler(Exception)
    async def unhandled(request: Request, exc: Exception) -> Response:  # pyright: ignore[reportUnusedFunction]
        logger.exception("LLM proxy failed on %s %s", request.method, request.url.path)
        return error_response(500, f"LLM proxy error: {type(exc).__name__}: {exc}", error_type="proxy_error")

    harden(
        app,
        max_body_size=max_body_size,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        size_hint="raise it with LLMProxy(max_body_size=...)",
        host_hint="LLMProxy(allowed_hosts=[...])",
        origin_hint="LLMProxy(allowed_origins=[...])",
    )
    return app
