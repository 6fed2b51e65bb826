"""The gateway's ASGI app: rollout-scoped OpenAI routes in front of the model servers, and the events API.

- `POST /proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{train|val}/openai/v1/chat/completions`
  (also `/completions`, `/responses`; `GET .../models`): the call is forwarded to the rollout's pinned
  upstream with `return_token_ids: true`, the mode's temperature (and logprobs in train mode), retried on
  408/409/429/5xx, relayed (streamed when asked) and recorded as an LLM span of the attempt.
- `POST /rollouts/{rollout_id}/attempt/{attempt_id}/events`: `{"event_type", "data"}` -> a reward or
  annotation span of the attempt. Answered 201 only once the span is in the store.

Both need `Authorization: Bearer <key of the attempt>` (see `keys.attempt_key`). Unknown rollout or
attempt -> 404, stale or ended attempt -> 409, malformed body -> 400 (OpenAI routes) / 422 (events).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentlightning.llm_proxy.call import CallKind, ProxyCall
from agentlightning.llm_proxy.forward import error_response, forward_call
from agentlightning.llm_proxy.runtime import ProxyRuntime
from agentlightning.utils.body_limit import BodySizeLimitMiddleware

from .attempts import AttemptDirectory, GatewayError
from .config import GATEWAY_MODES, GatewayConfig
from .events import event_span, parse_event
from .keys import bearer_token, key_matches
from .responses import forward_responses_call

__all__ = ["build_gateway_app", "GatewayState", "PROXY_PREFIX", "EVENTS_PATH", "HEALTH_PATH"]

logger = logging.getLogger(__name__)

PROXY_PREFIX = "/proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{mode}/openai/v1"
EVENTS_PATH = "/rollouts/{rollout_id}/attempt/{attempt_id}/events"
HEALTH_PATH = "/health"


class GatewayState:
    """What the app serves with: config, secret, the attempt directory and the proxy runtime (client, exporter)."""

    def __init__(self, config: GatewayConfig, secret: str, directory: AttemptDirectory, runtime: ProxyRuntime) -> None:
        self.config = config
        self.secret = secret
        self.directory = directory
        self.runtime = runtime


def _problem(status_code: int, message: str) -> JSONResponse:
    """Error body of the events API (`detail`, like the store server)."""
    return JSONResponse({"detail": message}, status_code=status_code)


def _parse_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"the request body is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ValueError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body  # type: ignore[return-value]


async def _authorize(state: GatewayState, request: Request) -> tuple[str, str]:
    """(rollout id, attempt id) of a request carrying the attempt's key; GatewayError(401) otherwise."""
    rollout_id = request.path_params["rollout_id"]
    attempt_id = request.path_params["attempt_id"]
    if not key_matches(state.secret, rollout_id, attempt_id, bearer_token(request.headers)):
        raise GatewayError(
            401,
            f"missing or wrong bearer key for rollout {rollout_id!r} attempt {attempt_id!r}; send "
            "`Authorization: Bearer $AGL_KEY` (the key handed to this attempt)",
        )
    return rollout_id, attempt_id


def shape_request(body: dict[str, Any], kind: str, mode: str, config: GatewayConfig) -> None:
    """Apply the mode's policy to a request body: token ids, temperature, logprobs in train mode."""
    body["return_token_ids"] = True
    temperature = config.temperature(mode)
    if temperature is not None:
        body["temperature"] = temperature
    if mode != "train" or not config.train_logprobs:
        return
    if kind == "chat":
        body["logprobs"] = True
    elif kind == "completion":
        if not isinstance(body.get("logprobs"), int) or isinstance(body.get("logprobs"), bool) or body["logprobs"] < 1:
            body["logprobs"] = 1
    else:
        include = [str(i) for i in body.get("include") or []]
        if "message.output_text.logprobs" not in include:
            include.append("message.output_text.logprobs")
        body["include"] = include


async def _proxy(state: GatewayState, request: Request, kind: str) -> Response:
    start_time = time.time()
    mode = request.path_params["mode"]
    if mode not in GATEWAY_MODES:
        return error_response(
            404, f"unknown mode {mode!r} in the URL; use one of {GATEWAY_MODES}", error_type="not_found"
        )
    try:
        rollout_id, attempt_id = await _authorize(state, request)
        rollout = await state.directory.check(rollout_id, attempt_id)
    except GatewayError as exc:
        return error_response(exc.status_code, exc.message, error_type="gateway_error")
    try:
        body = _parse_object(await request.body())
    except ValueError as exc:
        return error_response(400, str(exc), error_type="invalid_request_error")
    try:
        upstream = await state.directory.upstream(rollout)
    except GatewayError as exc:
        return error_response(exc.status_code, exc.message, error_type="gateway_error")
    model = body.get("model", upstream.default_model)
    if not isinstance(model, str) or not model:
        return error_response(
            400, "the request needs a 'model' (a non-empty string)", error_type="invalid_request_error", param="model"
        )
    if kind == "chat" and not isinstance(body.get("messages"), list):
        return error_response(400, "'messages' must be a list", error_type="invalid_request_error", param="messages")
    if kind == "completion" and body.get("prompt") is None:
        return error_response(400, "the request needs a 'prompt'", error_type="invalid_request_error", param="prompt")
    if kind == "responses" and body.get("input") is None:
        return error_response(400, "the request needs an 'input'", error_type="invalid_request_error", param="input")
    body["model"] = model
    client_body = dict(body)
    shape_request(body, kind, mode, state.config)
    call = ProxyCall(
        kind="chat" if kind == "responses" else kind,  # type: ignore[arg-type]
        client_body=client_body,
        body=body,
        headers=request.headers,
        start_time=start_time,
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        client_stream=bool(body.get("stream")),
        extra_attributes={"agentlightning.gateway.mode": mode},
    )
    deployment = upstream.deployment(model)
    if kind == "responses":
        return await forward_responses_call(state.runtime, call, deployment)
    return await forward_call(state.runtime, call, [deployment])


async def _models(state: GatewayState, request: Request) -> Response:
    mode = request.path_params["mode"]
    if mode not in GATEWAY_MODES:
        return error_response(
            404, f"unknown mode {mode!r} in the URL; use one of {GATEWAY_MODES}", error_type="not_found"
        )
    try:
        rollout_id, attempt_id = await _authorize(state, request)
        rollout = await state.directory.check(rollout_id, attempt_id)
        upstream = await state.directory.upstream(rollout)
    except GatewayError as exc:
        return error_response(exc.status_code, exc.message, error_type="gateway_error")
    if upstream.default_model is not None:
        data = [{"id": upstream.default_model, "object": "model", "created": 0, "owned_by": "agentlightning"}]
        return JSONResponse({"object": "list", "data": data})
    deployment = upstream.deployment("*")
    headers = {"Authorization": f"Bearer {deployment.api_key}"} if deployment.api_key else {}
    try:
        async with state.runtime.http_client().get(deployment.url("models"), headers=headers) as response:
            content = await response.read()
            return Response(content, status_code=response.status, media_type="application/json")
    except Exception as exc:
        return error_response(
            502, f"upstream {upstream.api_base} did not list its models: {exc}", error_type="upstream_error"
        )


async def _events(state: GatewayState, request: Request) -> Response:
    try:
        rollout_id, attempt_id = await _authorize(state, request)
    except GatewayError as exc:
        return _problem(exc.status_code, exc.message)
    try:
        event = parse_event(_parse_object(await request.body()))
    except ValueError as exc:
        return _problem(422, str(exc))
    try:
        await state.directory.check(rollout_id, attempt_id)
    except GatewayError as exc:
        return _problem(exc.status_code, exc.message)
    store = state.directory.store
    span = event_span(event, rollout_id, attempt_id)
    stored = await store.add_many_spans([span])
    if len(stored) == 1:
        span = stored[0]
    return JSONResponse(
        {
            "rollout_id": rollout_id,
            "attempt_id": attempt_id,
            "event_type": event.event_type,
            "span_id": span.span_id,
            "sequence_id": span.sequence_id,
        },
        status_code=201,
    )


def build_gateway_app(state: GatewayState) -> FastAPI:
    """The gateway app over `state`; the HTTP client and span exporter live in its lifespan."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await state.runtime.startup()
        try:
            yield
        finally:
            await state.runtime.shutdown()

    app = FastAPI(title="agentlightning gateway", lifespan=lifespan, docs_url=None, redoc_url=None)

    def proxy_route(kind: CallKind | str) -> Any:
        async def handle(request: Request) -> Response:
            return await _proxy(state, request, kind)

        return handle

    async def models(request: Request) -> Response:
        return await _models(state, request)

    async def events(request: Request) -> Response:
        return await _events(state, request)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    app.add_route(HEALTH_PATH, health, methods=["GET"], include_in_schema=False)
    app.add_route(PROXY_PREFIX + "/chat/completions", proxy_route("chat"), methods=["POST"])
    app.add_route(PROXY_PREFIX + "/completions", proxy_route("completion"), methods=["POST"])
    app.add_route(PROXY_PREFIX + "/responses", proxy_route("responses"), methods=["POST"])
    app.add_route(PROXY_PREFIX + "/models", models, methods=["GET"])
    app.add_route(EVENTS_PATH, events, methods=["POST"])

    @app.exception_handler(Exception)
    async def unhandled(request: Request, exc: Exception) -> Response:  # pyright: ignore[reportUnusedFunction]
        logger.exception("gateway failed on %s %s", request.method, request.url.path)
        return error_response(500, f"gateway error: {type(exc).__name__}: {exc}", error_type="gateway_error")

    app.add_middleware(BodySizeLimitMiddleware, max_body_size=state.config.max_body_size)  # type: ignore[arg-type]
    return app
