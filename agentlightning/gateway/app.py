"""The gateway's ASGI app: rollout-scoped OpenAI routes in front of the model servers, and the events API.

- `POST /proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{train|val}/openai/v1/chat/completions`
  (also `/completions`, `/responses`; `GET .../models`): the call is sent as `GatewayConfig.model_name`
  (else the agent's model, `auto` resolved), forwarded to the rollout's pinned upstream with
  `return_token_ids: true`, the mode's temperature (and logprobs in train mode), retried on 408/409/429/5xx,
  relayed (streamed when asked) and recorded as an LLM span of the attempt.
- `POST /rollouts/{rollout_id}/attempt/{attempt_id}/events` (and v1.0's `/api/rollouts/...` path):
  `{"event_type", "data"}` -> a reward or annotation span of the attempt, answered once it is stored.
- Operator routes (`admin.py`): `/proxy/pause|resume|state`, `/api/models`, and v1.0's rollouts REST
  (`rest_v1.py`), all behind the admin key.

Agent routes need `Authorization: Bearer <key of the attempt>` (see `keys.attempt_key`). Unknown rollout or
attempt -> 404, stale or ended attempt -> 409, malformed body -> 400 (OpenAI routes) / 422 (events), paused
-> 429 with `Retry-After`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, Optional

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentlightning.llm_proxy.call import CallKind, ProxyCall
from agentlightning.llm_proxy.forward import ReleaseAtEnd, error_response, forward_call
from agentlightning.types import Rollout
from agentlightning.web.hardening import harden

from .admin import add_admin_routes
from .attempts import GatewayError, Upstream
from .config import AUTO_MODEL, GATEWAY_MODES, GatewayConfig
from .events import event_span, parse_event
from .keys import bearer_token, key_matches
from .responses import forward_responses_call
from .state import GatewayState, is_admin, paused_response

__all__ = ["build_gateway_app", "GatewayState", "PROXY_PREFIX", "EVENTS_PATH", "V1_EVENTS_PATH", "HEALTH_PATH"]

logger = logging.getLogger(__name__)

PROXY_PREFIX = "/proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{mode}/openai/v1"
EVENTS_PATH = "/rollouts/{rollout_id}/attempt/{attempt_id}/events"
V1_EVENTS_PATH = "/api" + EVENTS_PATH
HEALTH_PATH = "/health"


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


def _requested_model(body: dict[str, Any]) -> Optional[str]:
    model = body.get("model")
    return None if model in (None, "", AUTO_MODEL) else model


async def _route(
    state: GatewayState, rollout_id: str, rollout: Any, body: dict[str, Any]
) -> tuple[Any, str, dict[str, Any]]:
    """(deployment, model to send, span attributes) of a call: registered endpoints first, then upstreams/resource."""
    requested = _requested_model(body)
    if state.registry:
        names = state.registry.names()
        model = state.config.model_name or requested or (names[0] if len(names) == 1 else None)
        if model is None:
            raise GatewayError(
                400,
                f"the call names no model (or 'auto') and several are registered ({names}); name one, or start "
                "the gateway with a model name (GatewayConfig.model_name / agl gateway --model-name)",
            )
        registered = state.registry.pick(model, rollout_id)
        if registered is None:
            raise GatewayError(
                503, f"no endpoint is registered for model {model!r} (registered: {names}); POST /api/models"
            )
        attributes = {"agentlightning.gateway.model_version": registered.entry.version,
                      "agentlightning.gateway.endpoint": registered.entry.endpoint}  # fmt: skip
        return registered.router.resolve(model)[0], model, attributes
    upstream: Upstream = await state.directory.upstream(rollout)
    model = state.config.model_name or requested or upstream.default_model or body.get("model")
    if not isinstance(model, str) or not model:
        raise GatewayError(400, "the request needs a 'model' (a non-empty string)")
    return upstream.deployment(model), model, {}


def _unknown_mode(request: Request) -> Optional[Response]:
    """The 404 for a mode in the URL the gateway does not serve; None for a known one."""
    mode = request.path_params["mode"]
    if mode in GATEWAY_MODES:
        return None
    return error_response(404, f"unknown mode {mode!r} in the URL; use one of {GATEWAY_MODES}", error_type="not_found")


async def _attempt(state: GatewayState, request: Request) -> tuple[str, str, Rollout]:
    """The rollout and attempt the request's key opens, and the rollout; GatewayError when refused."""
    rollout_id, attempt_id = await _authorize(state, request)
    return rollout_id, attempt_id, await state.directory.check(rollout_id, attempt_id)


async def _proxy(state: GatewayState, request: Request, kind: str) -> Response:
    start_time = time.time()
    mode = request.path_params["mode"]
    refused = _unknown_mode(request)
    if refused is not None:
        return refused
    try:
        rollout_id, attempt_id, rollout = await _attempt(state, request)
    except GatewayError as exc:
        return error_response(exc.status_code, exc.message, error_type="gateway_error")
    try:
        body = _parse_object(await request.body())
    except ValueError as exc:
        return error_response(400, str(exc), error_type="invalid_request_error")
    if "model" in body and not isinstance(body["model"], str):
        return error_response(400, "'model' must be a string", error_type="invalid_request_error", param="model")
    if kind == "chat" and not isinstance(body.get("messages"), list):
        return error_response(400, "'messages' must be a list", error_type="invalid_request_error", param="messages")
    if kind == "completion" and body.get("prompt") is None:
        return error_response(400, "the request needs a 'prompt'", error_type="invalid_request_error", param="prompt")
    if kind == "responses" and body.get("input") is None:
        return error_response(400, "the request needs an 'input'", error_type="invalid_request_error", param="input")
    try:
        deployment, model, attributes = await _route(state, rollout_id, rollout, body)
    except GatewayError as exc:
        param = "model" if exc.status_code == 400 else None
        return error_response(exc.status_code, exc.message, error_type="gateway_error", param=param)
    if not state.gate.enter():
        return paused_response(state.gate)
    try:
        if body.get("model") != model:
            attributes["agentlightning.gateway.requested_model"] = str(body.get("model"))
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
            extra_attributes={"agentlightning.gateway.mode": mode, **attributes},
        )
        if kind == "responses":
            response = await forward_responses_call(state.runtime, call, deployment)
        else:
            response = await forward_call(state.runtime, call, [deployment])
    except BaseException:
        state.gate.exit()
        raise
    return ReleaseAtEnd(response, state.gate)


async def _models(state: GatewayState, request: Request) -> Response:
    refused = _unknown_mode(request)
    if refused is not None:
        return refused
    try:
        rollout_id, attempt_id, rollout = await _attempt(state, request)
        names = [state.config.model_name] if state.config.model_name else state.registry.names()
        upstream = None if names else await state.directory.upstream(rollout)
    except GatewayError as exc:
        return error_response(exc.status_code, exc.message, error_type="gateway_error")
    if upstream is None or upstream.default_model is not None:
        names = names or [str(upstream.default_model) if upstream is not None else ""]
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "agentlightning"} for name in names]
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


async def _events(state: GatewayState, request: Request, *, v1: bool = False) -> Response:
    """Store an event as a span. On v1.0's path (`v1`) the admin key is accepted too, attempt `0` means
    the rollout's latest attempt, and the answer is v1.0's Event (200)."""
    try:
        if v1:
            rollout_id, attempt_id = await _v1_event_target(state, request)
        else:
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
    answer: dict[str, Any] = {"rollout_id": rollout_id, "attempt_id": attempt_id, "event_type": event.event_type}
    answer.update({"span_id": span.span_id, "sequence_id": span.sequence_id})
    if v1:
        answer.update({"timestamp": span.start_time, "data": event.data})
    return JSONResponse(answer, status_code=200 if v1 else 201)


async def _v1_event_target(state: GatewayState, request: Request) -> tuple[str, str]:
    rollout_id = request.path_params["rollout_id"]
    attempt_id = request.path_params["attempt_id"]
    if not is_admin(state, request.headers):
        return await _authorize(state, request)
    if attempt_id == "0":
        latest = await state.directory.store.get_latest_attempt(rollout_id)
        if latest is None:
            raise GatewayError(404, f"Rollout not found: {rollout_id}")
        attempt_id = latest.attempt_id
    return rollout_id, attempt_id


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

    async def v1_events(request: Request) -> Response:
        return await _events(state, request, v1=True)

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    app.add_route(HEALTH_PATH, health, methods=["GET"], include_in_schema=False)
    app.add_route(PROXY_PREFIX + "/chat/completions", proxy_route("chat"), methods=["POST"])
    app.add_route(PROXY_PREFIX + "/completions", proxy_route("completion"), methods=["POST"])
    app.add_route(PROXY_PREFIX + "/responses", proxy_route("responses"), methods=["POST"])
    app.add_route(PROXY_PREFIX + "/models", models, methods=["GET"])
    app.add_route(EVENTS_PATH, events, methods=["POST"])
    app.add_route(V1_EVENTS_PATH, v1_events, methods=["POST"])
    add_admin_routes(app, state)

    @app.exception_handler(Exception)
    async def unhandled(request: Request, exc: Exception) -> Response:  # pyright: ignore[reportUnusedFunction]
        logger.exception("gateway failed on %s %s", request.method, request.url.path)
        return error_response(500, f"gateway error: {type(exc).__name__}: {exc}", error_type="gateway_error")

    # Every route but /health needs a key, which a rebound page does not have: no Host check; Origin still is.
    harden(
        app,
        max_body_size=state.config.max_body_size,
        allowed_hosts=None,
        size_hint="raise it with `agl gateway --max-body-size` / GatewayConfig(max_body_size=...)",
        origin_hint="a program instead: the gateway serves agents, not web pages",
    )
    return app
