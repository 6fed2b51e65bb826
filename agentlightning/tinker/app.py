"""The Tinker REST routes (`/api/v1/...`, as the official SDK calls them) over a `TinkerService`.

Every error is answered in Tinker's shape (`{"error", "category"}`) with a 4xx status; an unexpected
failure inside a queued call reaches the client through its future (category "server"), never as a 500.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Dict, Optional

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


def build_app(service: TinkerService) -> FastAPI:
    app = FastAPI(title="agl tinker", docs_url=None, redoc_url=None, openapi_url=None)
    keys = set(service.config.api_keys)

    @app.middleware("http")
    async def _guard(request: Request, call_next: Any) -> Response:  # type: ignore[reportUnusedFunction]
        if service.config.require_api_key and request.url.path not in _OPEN_PATHS:
            key = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
            if key not in keys:
                return _fail(
                    401, "missing or unknown API key; pass the key `agl tinker` was started with (TINKER_API_KEY)"
                )
        try:
            return await call_next(request)
        except TinkerError as exc:
            return _fail(exc.status, exc.message, exc.category)
        except Exception as exc:  # answered as the caller's problem with the reason, never as a bare 500
            logger.exception("agl tinker could not serve %s", request.url.path)
            return _fail(400, f"{type(exc).__name__}: {exc}", "server")

    @app.exception_handler(TinkerError)
    async def _tinker_error(_request: Request, exc: TinkerError) -> JSONResponse:  # type: ignore[reportUnusedFunction]
        return _fail(exc.status, exc.message, exc.category)

    @app.exception_handler(404)
    async def _not_found(request: Request, _exc: Exception) -> JSONResponse:  # type: ignore[reportUnusedFunction]
        return _fail(404, f"{request.method} {request.url.path} is not a route of agl tinker")

    @app.get("/api/v1/healthz")
    async def _health() -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return {"status": "ok"}

    @app.post("/api/v1/client/config")
    async def _client_config() -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return CLIENT_CONFIG

    @app.post("/api/v1/client/dynamic_config")
    async def _dynamic_config() -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return {"refresh_interval_sec": 3600, "sample_cancel_enabled": False}

    @app.get("/api/v1/get_server_capabilities")
    async def _capabilities() -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.capabilities()

    @app.post("/api/v1/telemetry")
    async def _telemetry() -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return {"status": "accepted"}

    @app.post("/api/v1/create_session")
    async def _create_session(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.create_session(await _json(request))

    @app.post("/api/v1/session_heartbeat")
    async def _heartbeat(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.heartbeat(str((await _json(request)).get("session_id")))

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def _finish(session_id: str) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return await service.finish_session(session_id)

    @app.post("/api/v1/create_model")
    async def _create_model(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.create_model(await _json(request))

    @app.post("/api/v1/get_info")
    async def _get_info(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.get_info(await _json(request))

    @app.post("/api/v1/forward_backward")
    async def _forward_backward(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        body = await request.body()
        if request.headers.get("content-encoding") == "zstd":
            import zstandard

            body = zstandard.ZstdDecompressor().decompressobj().decompress(body)
        if PROTOBUF not in request.headers.get("content-type", ""):
            raise TinkerUserError(f"forward_backward takes a {PROTOBUF} body (the tinker SDK sends one)")
        return service.forward_backward(decode_forward_backward(body))

    @app.post("/api/v1/optim_step")
    async def _optim_step(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.optim_step(await _json(request))

    @app.post("/api/v1/save_weights")
    async def _save(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.save_weights(await _json(request), for_sampler=False)

    @app.post("/api/v1/save_weights_for_sampler")
    async def _save_for_sampler(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.save_weights(await _json(request), for_sampler=True)

    @app.post("/api/v1/load_weights")
    async def _load(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.load_weights(await _json(request))

    @app.post("/api/v1/weights_info")
    async def _weights_info(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.weights_info(str((await _json(request)).get("tinker_path") or ""))

    @app.get("/api/v1/training_runs/{run_id}/checkpoints")
    async def _checkpoints(run_id: str) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.list_checkpoints(run_id)

    @app.get("/api/v1/training_runs/{run_id}")
    async def _training_run(run_id: str) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.training_run(run_id)

    @app.post("/api/v1/create_sampling_session")
    async def _create_sampling_session(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.create_sampling_session(await _json(request))

    @app.get("/api/v1/samplers/{sampler_id}")
    async def _sampler(sampler_id: str) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.sampler_info(sampler_id)

    @app.post("/api/v1/asample")
    async def _asample(request: Request) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        return service.asample(await _json(request))

    @app.post("/api/v1/retrieve_future")
    async def _retrieve(request: Request) -> Response:  # type: ignore[reportUnusedFunction]
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

    @app.get("/api/v1/agl/policy")
    async def _policy(model_path: Optional[str] = None, base_model: Optional[str] = None) -> Dict[str, Any]:  # type: ignore[reportUnusedFunction]
        """Where agents reach the policy engine that samples a checkpoint (our extension of the API)."""
        if not model_path and not base_model:
            raise TinkerUserError("give model_path (tinker://...) or base_model")
        if model_path:
            record = service.checkpoint(model_path)
            base = service.runs[record.run_id].base_model if record.run_id in service.runs else ""
        else:
            record, base = None, str(base_model)
        import asyncio

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

    return app
