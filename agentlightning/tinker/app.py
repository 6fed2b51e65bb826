"""The Tinker REST routes (`/api/v1/...`, as the official SDK calls them) over a `TinkerService`.

Every error is answered in Tinker's shape (`{"error", "category"}`) with a 4xx status; an unexpected
failure inside a queued call reaches the client through its future (category "server"), never as a 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable, Dict, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from .errors import TinkerError, TinkerNotFound, TinkerUserError, error_body
from .service import TinkerService
from .wire import PROTOBUF, decode_forward_backward

__all__ = ["build_app", "CLIENT_CONFIG"]

logger = logging.getLogger(__name__)

CLIENT_CONFIG: Dict[str, Any] = {
    "pjwt_auth_enabled": False,
    "credential_default_source": "api_key",
    "parallel_fwdbwd_chunks": False,
    "proto_compress_fwdbwd": False,
    "use_pyqwest_transport": False,
    "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False,
    "sample_join_sampling_session": False,
}
"""Feature flags for the SDK: plain API-key auth, one ordered forward/backward stream, per-future polling."""

_OPEN_PATHS = {"/api/v1/healthz", "/api/v1/client/config", "/api/v1/client/dynamic_config"}


def _fail(status: int, message: str, category: str = "user") -> JSONResponse:
    return JSONResponse(error_body(message, category), status_code=status)


async def _json(request: Request) -> Dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError as exc:
        raise TinkerUserError(f"the request body is not JSON: {exc}")
    if not isinstance(body, dict):
        raise TinkerUserError("the request body must be a JSON object")
    return body  # type: ignore[return-value]


def _service(request: Request) -> TinkerService:
    return request.app.state.tinker_service


async def _guard(request: Request, call_next: Any) -> Response:
    service = _service(request)
    if service.config.require_api_key and request.url.path not in _OPEN_PATHS:
        key = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
        if key not in service.config.api_keys:
            return _fail(401, "missing or unknown API key; pass the key `agl tinker` was started with (TINKER_API_KEY)")
    try:
        return await call_next(request)
    except TinkerError as exc:
        return _fail(exc.status, exc.message, exc.category)
    except Exception as exc:  # answered as the caller's problem with the reason, never as a bare 500
        logger.exception("agl tinker could not serve %s", request.url.path)
        return _fail(400, f"{type(exc).__name__}: {exc}", "server")


async def _tinker_error(_request: Request, exc: TinkerError) -> JSONResponse:
    return _fail(exc.status, exc.message, exc.category)


async def _not_found(request: Request, _exc: Exception) -> JSONResponse:
    return _fail(404, f"{request.method} {request.url.path} is not a route of agl tinker")


_CONSTANT_ROUTES: Dict[tuple[str, str], Dict[str, Any]] = {
    ("GET", "/api/v1/healthz"): {"status": "ok"},
    ("POST", "/api/v1/client/config"): CLIENT_CONFIG,
    ("POST", "/api/v1/client/dynamic_config"): {"refresh_interval_sec": 3600, "sample_cancel_enabled": False},
    ("POST", "/api/v1/telemetry"): {"status": "accepted"},
}

_JSON_ROUTES: Dict[str, Callable[[TinkerService, Dict[str, Any]], Dict[str, Any]]] = {
    "/api/v1/create_session": TinkerService.create_session,
    "/api/v1/session_heartbeat": lambda service, body: service.heartbeat(str(body.get("session_id"))),
    "/api/v1/create_model": TinkerService.create_model,
    "/api/v1/get_info": TinkerService.get_info,
    "/api/v1/optim_step": TinkerService.optim_step,
    "/api/v1/save_weights": lambda service, body: service.save_weights(body, for_sampler=False),
    "/api/v1/save_weights_for_sampler": lambda service, body: service.save_weights(body, for_sampler=True),
    "/api/v1/load_weights": TinkerService.load_weights,
    "/api/v1/weights_info": lambda service, body: service.weights_info(str(body.get("tinker_path") or "")),
    "/api/v1/create_sampling_session": TinkerService.create_sampling_session,
    "/api/v1/asample": TinkerService.asample,
}
"""POST routes that take a JSON object and answer what the service returns."""


def _constant_route(answer: Dict[str, Any]) -> Callable[[], Any]:
    async def route() -> Dict[str, Any]:
        return answer

    return route


def _json_route(call: Callable[[TinkerService, Dict[str, Any]], Dict[str, Any]]) -> Callable[[Request], Any]:
    async def route(request: Request) -> Dict[str, Any]:
        return call(_service(request), await _json(request))

    return route


async def _capabilities(request: Request) -> Dict[str, Any]:
    return _service(request).capabilities()


async def _finish(session_id: str, request: Request) -> Dict[str, Any]:
    return await _service(request).finish_session(session_id)


async def _forward_backward(request: Request) -> Dict[str, Any]:
    body = await request.body()
    if request.headers.get("content-encoding") == "zstd":
        import zstandard

        body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
    if PROTOBUF not in request.headers.get("content-type", ""):
        raise TinkerUserError(f"forward_backward takes a {PROTOBUF} body (the tinker SDK sends one)")
    return _service(request).forward_backward(decode_forward_backward(body))


async def _checkpoints(run_id: str, request: Request) -> Dict[str, Any]:
    return _service(request).list_checkpoints(run_id)


async def _training_run(run_id: str, request: Request) -> Dict[str, Any]:
    return _service(request).training_run(run_id)


async def _sampler(sampler_id: str, request: Request) -> Dict[str, Any]:
    return _service(request).sampler_info(sampler_id)


async def _retrieve(request: Request) -> Response:
    service = _service(request)
    request_id = str((await _json(request)).get("request_id") or "")
    try:
        outcome = await service.futures.wait(request_id, service.config.retrieve_wait_s)
    except KeyError:
        raise TinkerNotFound(f"future {request_id!r} is unknown here (or its result was dropped)")
    if outcome is None:
        return JSONResponse({"type": "try_again", "request_id": request_id, "queue_state": "active"})
    if outcome.error is not None:
        return JSONResponse(error_body(outcome.error, outcome.category))
    if outcome.protobuf is not None:
        return Response(outcome.protobuf, media_type=PROTOBUF)
    return JSONResponse(outcome.json)


async def _policy(
    request: Request, model_path: Optional[str] = None, base_model: Optional[str] = None
) -> Dict[str, Any]:
    """Where agents reach the policy engine that samples a checkpoint (our extension of the API)."""
    service = _service(request)
    if not model_path and not base_model:
        raise TinkerUserError("give model_path (tinker://...) or base_model")
    if model_path:
        record = service.checkpoint(model_path)
        base = service.runs[record.run_id].base_model if record.run_id in service.runs else ""
    else:
        record, base = None, str(base_model)
    policy = await asyncio.to_thread(service.policy_for, model_path, base)
    endpoint = await asyncio.to_thread(policy.endpoint)
    return {
        "endpoint": endpoint,
        "model": policy.server.model_name,
        "weights_version": policy.version,
        "system_fingerprint": f"weights-v{policy.version}",
        "fingerprint": policy.fingerprints.get(policy.version),
        "checkpoint_weights_version": record.weights_version if record else None,
    }


def build_app(service: TinkerService) -> FastAPI:
    app = FastAPI(title="agl tinker", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.tinker_service = service
    app.middleware("http")(_guard)
    app.add_exception_handler(TinkerError, _tinker_error)  # type: ignore[arg-type]
    app.add_exception_handler(404, _not_found)
    for (method, path), answer in _CONSTANT_ROUTES.items():
        app.add_api_route(path, _constant_route(answer), methods=[method])
    for path, call in _JSON_ROUTES.items():
        app.add_api_route(path, _json_route(call), methods=["POST"])
    app.add_api_route("/api/v1/get_server_capabilities", _capabilities, methods=["GET"])
    app.add_api_route("/api/v1/sessions/{session_id}/finish", _finish, methods=["POST"])
    app.add_api_route("/api/v1/forward_backward", _forward_backward, methods=["POST"])
    app.add_api_route("/api/v1/training_runs/{run_id}/checkpoints", _checkpoints, methods=["GET"])
    app.add_api_route("/api/v1/training_runs/{run_id}", _training_run, methods=["GET"])
    app.add_api_route("/api/v1/samplers/{sampler_id}", _sampler, methods=["GET"])
    app.add_api_route("/api/v1/retrieve_future", _retrieve, methods=["POST"])
    app.add_api_route("/api/v1/agl/policy", _policy, methods=["GET"])
    return app
