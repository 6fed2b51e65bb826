"""The gateway's operator routes (v1.0's management surface), all behind the admin key.

- `POST /proxy/pause` `{"retry_after_seconds": 5, "reason": null}` (body optional): new model calls get
  429 + `Retry-After` + `X-Agl-Paused: true` until `POST /proxy/resume`; calls already admitted finish.
  `GET /proxy/state` -> `{"paused", "retry_after_seconds", "reason", "inflight"}`: a trainer polls it
  until `inflight` is 0 before it changes weights. The gate can be linked to a policy server's
  (`Gateway.link_pause`), so either side's pause holds both.
- `POST /api/models` `[{"model", "endpoint", "version"}]` (201, echoed): register inference endpoints;
  `GET /api/models` lists them; `DELETE /api/models` drops them all (see `models.py`).
- v1.0's rollouts REST under `/api/rollouts` (see `rest_v1.py`).

The admin key is sent as `Authorization: Bearer <key>` or `x-api-key: <key>`; anything else is 401.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentlightning.web.pause import MAX_RETRY_AFTER_SECONDS

from .models import ModelEndpoint
from .rest_v1 import add_rollout_routes
from .state import GatewayState, is_admin, unauthorized_response

__all__ = ["add_admin_routes", "PauseRequest"]


class PauseRequest(BaseModel):
    """Body of `POST /proxy/pause`."""

    model_config = ConfigDict(extra="forbid")

    retry_after_seconds: float = Field(default=5, ge=0, le=MAX_RETRY_AFTER_SECONDS, allow_inf_nan=False)
    reason: Optional[str] = None


def _detail(status_code: int, detail: Any) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status_code)


async def _json(request: Request, default: Any) -> Any:
    raw = await request.body()
    if not raw.strip():
        return default
    return json.loads(raw)


def _validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    return [{"type": e["type"], "loc": ["body", *e["loc"]], "msg": e["msg"]} for e in exc.errors()]


def add_admin_routes(app: FastAPI, state: GatewayState) -> None:
    """Register the operator routes on the gateway app."""

    def guarded(handler: Any) -> Any:
        async def route(request: Request) -> Response:
            if not is_admin(state, request.headers):
                return unauthorized_response()
            try:
                return await handler(request)
            except json.JSONDecodeError as exc:
                return _detail(422, f"the request body is not JSON ({exc})")
            except ValidationError as exc:
                return _detail(422, _validation_detail(exc))

        return route

    async def pause(request: Request) -> Response:
        body = PauseRequest.model_validate(await _json(request, {}))
        state.gate.pause(body.reason, body.retry_after_seconds)
        return JSONResponse(state.gate.state())

    async def resume(request: Request) -> Response:
        state.gate.resume()
        return JSONResponse(state.gate.state())

    async def pause_state(request: Request) -> Response:
        return JSONResponse(state.gate.state())

    async def register_models(request: Request) -> Response:
        body = await _json(request, None)
        if not isinstance(body, list):
            return _detail(422, "the body must be a JSON array of {model, endpoint, version}")
        entries = [ModelEndpoint.model_validate(item) for item in body]  # type: ignore[reportUnknownVariableType]
        state.registry.register(entries)
        return JSONResponse([entry.model_dump() for entry in entries], status_code=201)

    async def list_models(request: Request) -> Response:
        return JSONResponse([entry.model_dump() for entry in state.registry.entries()])

    async def clear_models(request: Request) -> Response:
        state.registry.clear()
        return JSONResponse({"status": "ok"})

    app.add_route("/proxy/pause", guarded(pause), methods=["POST"])
    app.add_route("/proxy/resume", guarded(resume), methods=["POST"])
    app.add_route("/proxy/state", guarded(pause_state), methods=["GET"])
    app.add_route("/api/models", guarded(register_models), methods=["POST"])
    app.add_route("/api/models", guarded(list_models), methods=["GET"])
    app.add_route("/api/models", guarded(clear_models), methods=["DELETE"])
    add_rollout_routes(app, state)
