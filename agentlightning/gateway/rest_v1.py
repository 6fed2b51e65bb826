"""v1.0's rollouts REST (`/api/rollouts...`), served by the gateway on top of our store.

For a v1.0 trainer or controller pointed at our gateway. What differs from v1.0, and why:

- Rollouts are store rollouts: `POST /api/rollouts` enqueues them (`is_train` -> mode train/val,
  `config.timeout_seconds` -> the rollout's timeout), so our runners (e.g. with `ProcessAgent`) run them. A
  `rollout_id` chosen by the client is kept as an alias in the store (`metadata.v1.rollout_id`; the gateway
  reads the aliases back from the store after a restart), so a create retried with the same id returns the
  rollout made first, also across restarts; every route accepts the alias or the store's id, and answers
  with the alias.
- Routes are FastAPI routes with declared bodies and answers (`rest_v1_models.py`), listed in
  `/openapi.json`; bad input is a 422 whose `detail` names the field (`loc`), never a 500.
- States: ours map onto v1.0's four (`queuing`/`requeuing` -> queuing, `preparing`/`running` -> running,
  `succeeded`, `failed`/`cancelled` -> failed). PATCH enforces v1.0's transitions (409 otherwise).
- `DELETE` cancels a rollout that is not finished and hides it from these routes; the store keeps its spans.
- Events are the spans of the rollout's latest attempt: LLM calls as `model_request`, rewards as `reward`,
  posted events under their `event_type`. `format=triplet` trims them as v1.0 does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Optional

from fastapi import APIRouter, FastAPI, Query
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentlightning.adapter.extraction import logprobs_of, prompt_token_ids_of, response_token_ids_of
from agentlightning.attributes.rewards import get_reward_value, is_reward_span
from agentlightning.semconv import RAW_GEN_AI_REQUEST
from agentlightning.store.base import StorageUnavailableError
from agentlightning.store.transitions import ForbiddenTransitionError
from agentlightning.types import Rollout, RolloutConfig, Span

from .events import EVENT_TYPE_ATTRIBUTE
from .rest_v1_models import (
    MAX_INT64,
    RolloutCreate,
    RolloutDetail,
    RolloutPatch,
    TerminalPage,
    V1Event,
    V1Rollout,
    V1State,
)
from .state import GatewayState, is_admin, unauthorized_response

__all__ = ["add_rollout_routes", "v1_state"]

Int64 = Annotated[int, Query(ge=-MAX_INT64 - 1, le=MAX_INT64)]
_V1_STATES: dict[str, V1State] = {
    "queuing": "queuing",
    "requeuing": "queuing",
    "preparing": "running",
    "running": "running",
    "succeeded": "succeeded",
    "failed": "failed",
    "cancelled": "failed",
}
_OURS: dict[str, list[str]] = {
    "queuing": ["queuing", "requeuing"],
    "running": ["preparing", "running"],
    "succeeded": ["succeeded"],
    "failed": ["failed", "cancelled"],
}
_TRANSITIONS = {"queuing": {"running", "failed"}, "running": {"succeeded", "failed"}}
_DEFAULT_TIMEOUT = 3600


def v1_state(status: str) -> V1State:
    return _V1_STATES.get(status, "failed")


def _v1_meta(rollout: Rollout) -> dict[str, Any]:
    return dict((rollout.metadata or {}).get("v1") or {})


def _as_v1(rollout: Rollout) -> dict[str, Any]:
    meta = _v1_meta(rollout)
    attempt = getattr(rollout, "attempt", None)
    metadata = {"batch_idx": None, "sample_idx_in_batch": None, **(meta.get("metadata") or {})}
    return {
        "rollout_id": meta.get("rollout_id") or rollout.rollout_id,
        "input": rollout.input,
        "is_train": rollout.mode != "val",
        "config": meta.get("config") or {"timeout_seconds": _DEFAULT_TIMEOUT, "local": None, "k8s": None},
        "metadata": metadata,
        "status": {
            "state": v1_state(rollout.status),
            "k8s_job_name": meta.get("k8s_job_name"),
            "last_attempt_id": meta.get("last_attempt_id") or (attempt.attempt_id if attempt is not None else None),
            "error_message": meta.get("error_message"),
            "version": int(meta.get("version") or 1),
            "created_at": rollout.start_time,
            "updated_at": float(meta.get("updated_at") or rollout.end_time or rollout.start_time),
        },
    }


def _data_id(task: Any) -> str:
    if isinstance(task, Mapping):
        for key in ("data_id", "instance_id"):
            if task.get(key) is not None:  # type: ignore[union-attr]
                return str(task[key])  # type: ignore[index]
    return ""


def _event(span: Span, event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_type": event_type,
        "rollout_id": span.rollout_id,
        "attempt_id": span.attempt_id,
        "timestamp": span.start_time,
        "data": data,
    }


def _span_event(span: Span, triplet: bool) -> Optional[dict[str, Any]]:
    """The v1.0 event a span stands for (None: a span v1.0 has no event for)."""
    attributes = span.attributes
    if is_reward_span(span):
        return _event(span, "reward", {"value": get_reward_value(span)})
    if EVENT_TYPE_ATTRIBUTE in attributes:
        data = {k: v for k, v in attributes.items() if k != EVENT_TYPE_ATTRIBUTE}
        return _event(span, str(attributes[EVENT_TYPE_ATTRIBUTE]), data)
    if span.name == RAW_GEN_AI_REQUEST:
        return None  # the raw payload of a call whose own span is the event (v0.3 proxy / LiteLLM)
    prompt_ids = prompt_token_ids_of(span)
    if prompt_ids is None and "gen_ai.request.model" not in attributes:
        return None
    status_code = attributes.get("http.response.status_code")
    server = {"model": attributes.get("gen_ai.request.model"),
              "version": attributes.get("agentlightning.gateway.model_version", 0)}  # fmt: skip
    data: dict[str, Any] = {"server": server, "http_status": status_code}
    data["status"] = "error" if span.status.status_code == "ERROR" else "ok"
    if triplet:
        logprobs = (logprobs_of(span) or {}).get("content")
        values = [entry.get("logprob") for entry in logprobs] if isinstance(logprobs, list) else None
        data.update(
            prompt_token_ids=prompt_ids or [],
            response_token_ids=response_token_ids_of(span) or [],
            response_log_probs=values if values and all(isinstance(v, (int, float)) for v in values) else None,
        )
    else:
        data.update(model=server["model"], model_version=server["version"], attributes=dict(attributes))
    return _event(span, "model_request", data)


def _dedupe_by_prompt(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """v1.0's triplet rule: of model requests with the same prompt ids, only the last one stays."""
    last: dict[tuple[int, ...], int] = {}
    for index, event in enumerate(events):
        if event["event_type"] == "model_request":
            last[tuple(event["data"].get("prompt_token_ids") or [])] = index
    keep = set(last.values())
    return [e for i, e in enumerate(events) if e["event_type"] != "model_request" or i in keep]


def _detail(status_code: int, detail: Any) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status_code)


def _validation_detail(exc: RequestValidationError) -> list[dict[str, Any]]:
    """FastAPI's 422 detail without the refused `input` (it may hold what JSON cannot: NaN, a deep value)."""
    return [{"type": e.get("type"), "loc": list(e.get("loc", ())), "msg": e.get("msg")} for e in exc.errors()]


def _admin_route_class(state: GatewayState) -> type[APIRoute]:
    """Routes behind the admin key whose every refusal is a 4xx JSON answer (`{"detail": ...}`)."""

    class AdminRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                if not is_admin(state, request.headers):
                    return unauthorized_response()
                try:
                    return await handler(request)
                except RequestValidationError as exc:
                    return _detail(422, _validation_detail(exc))
                except HTTPException as exc:
                    if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):
                        return _detail(400, "the request body nests too deeply to be read as JSON")
                    return _detail(exc.status_code, exc.detail)
                except ValueError as exc:  # the store refusing a value (e.g. a NUL in a string)
                    return _detail(422, str(exc))
                except StorageUnavailableError as exc:  # disk full, read-only database: retry later
                    return _detail(503, str(exc))

            return guarded

    return AdminRoute


class _RolloutRoutes:
    """The handlers, over the gateway's store; client-chosen ids are aliases of store ids.

    The aliases live in the store (`metadata.v1.rollout_id`); the gateway indexes them in memory, reading
    them back from the store on first use, so a restarted gateway still knows every rollout it created.
    """

    def __init__(self, state: GatewayState) -> None:
        self.store = state.directory.store
        self._aliases: Optional[dict[str, str]] = None
        self._creating = asyncio.Lock()  # a create checks then enqueues: one at a time, so no id is made twice

    async def aliases(self) -> dict[str, str]:
        if self._aliases is None:
            page = await self.store.query_rollouts(sort_by="start_time", sort_order="asc")
            aliases: dict[str, str] = {}
            for rollout in page.items:
                meta = _v1_meta(rollout)
                alias = meta.get("rollout_id")
                if isinstance(alias, str) and alias and not meta.get("deleted"):
                    aliases[alias] = rollout.rollout_id
            self._aliases = aliases
        return self._aliases

    async def find(self, rollout_id: str) -> Optional[Rollout]:
        aliases = await self.aliases()
        rollout = await self.store.get_rollout_by_id(aliases.get(rollout_id, rollout_id))
        if rollout is None or _v1_meta(rollout).get("deleted"):
            return None
        return rollout

    @staticmethod
    def not_found(rollout_id: str) -> JSONResponse:
        return _detail(404, f"Rollout not found: {rollout_id}")

    async def create(self, rollouts: list[RolloutCreate]) -> Response:
        created: list[dict[str, Any]] = []
        async with self._creating:
            for item in rollouts:
                existing = await self.find(item.rollout_id) if item.rollout_id else None
                if existing is None:
                    existing = await self._enqueue(item)
                created.append(_as_v1(existing))
        return JSONResponse(created, status_code=201)

    async def _enqueue(self, item: RolloutCreate) -> Rollout:
        config: dict[str, Any] = {"timeout_seconds": _DEFAULT_TIMEOUT, "local": None, "k8s": None}
        if item.config is not None:
            config.update(item.config.model_dump())
        meta = {"rollout_id": item.rollout_id, "config": config, "metadata": item.metadata or {}, "version": 1}
        rollout = await self.store.enqueue_rollout(
            input=item.input,
            mode="train" if item.is_train else "val",
            config=RolloutConfig(timeout_seconds=float(config["timeout_seconds"])),
            metadata={"v1": meta},
        )
        if item.rollout_id:
            (await self.aliases())[item.rollout_id] = rollout.rollout_id
        return rollout

    async def list(self, state_in: list[V1State], limit: int) -> Response:
        ours = [status for s in state_in for status in _OURS[s]]
        page = await self.store.query_rollouts(status_in=ours, sort_by="start_time", sort_order="asc")  # type: ignore[arg-type]
        found = [_as_v1(r) for r in page.items if not _v1_meta(r).get("deleted")]
        return JSONResponse(found[: max(limit, 0)])

    async def terminal(self, after: int, limit: int) -> Response:
        after, limit = max(0, after), max(1, limit)
        statuses = ["succeeded", "failed", "cancelled"]
        page = await self.store.query_rollouts(status_in=statuses, sort_by="end_time", sort_order="asc")  # type: ignore[arg-type]
        log = list(page.items)
        consumed = log[after : after + limit]
        items = [
            {
                "rollout_id": _as_v1(r)["rollout_id"],
                "state": v1_state(r.status),
                "data_id": _data_id(r.input),
                "is_train": r.mode != "val",
            }  # fmt: skip
            for r in consumed
            if not _v1_meta(r).get("deleted")
        ]
        return JSONResponse({"items": items, "next_after": after + len(consumed), "total_terminal": len(log)})

    async def get(self, rollout_id: str) -> Response:
        rollout = await self.find(rollout_id)
        if rollout is None:
            return self.not_found(rollout_id)
        attempts = await self.store.query_attempts(rollout.rollout_id)
        return JSONResponse({"rollout": _as_v1(rollout), "attempts": [a.attempt_id for a in attempts]})

    async def patch(self, rollout_id: str, body: RolloutPatch) -> Response:
        rollout = await self.find(rollout_id)
        if rollout is None:
            return self.not_found(rollout_id)
        sent = body.status.model_dump(exclude_unset=True) if body.status is not None else {}
        if not sent:
            return JSONResponse(_as_v1(rollout))
        meta = _v1_meta(rollout)
        current = v1_state(rollout.status)
        new_state = sent.pop("state", None)
        if new_state is not None and new_state not in _TRANSITIONS.get(current, set()):
            return _detail(409, f"Rollout {rollout_id}: cannot transition {current} -> {new_state}")
        meta.update(sent, version=int(meta.get("version") or 1) + 1, updated_at=time.time())
        metadata = {**(rollout.metadata or {}), "v1": meta}
        if new_state is None:
            return JSONResponse(_as_v1(await self.store.update_rollout(rollout.rollout_id, metadata=metadata)))
        # The store's rollouts start running through `preparing` (claimed, no span yet): v1.0's `running`.
        ours = "preparing" if new_state == "running" else new_state
        try:
            rollout = await self.store.update_rollout(rollout.rollout_id, status=ours, metadata=metadata)
        except ForbiddenTransitionError as exc:
            return _detail(409, f"Rollout {rollout_id}: {exc}")
        return JSONResponse(_as_v1(rollout))

    async def delete(self, rollout_id: str) -> Response:
        rollout = await self.find(rollout_id)
        if rollout is not None:
            metadata = {**(rollout.metadata or {}), "v1": {**_v1_meta(rollout), "deleted": True}}
            if v1_state(rollout.status) in ("queuing", "running"):
                await self.store.update_rollout(rollout.rollout_id, status="cancelled", metadata=metadata)
            else:
                await self.store.update_rollout(rollout.rollout_id, metadata=metadata)
            (await self.aliases()).pop(rollout_id, None)
        return Response(status_code=204)

    async def events(self, rollout_id: str, event_type: Optional[str], format: Optional[str]) -> Response:
        rollout = await self.find(rollout_id)
        if rollout is None:
            return self.not_found(rollout_id)
        triplet = format == "triplet"
        spans = await self.store.query_spans(rollout.rollout_id, "latest")
        found = [event for span in spans if (event := _span_event(span, triplet)) is not None]
        if event_type is not None:
            found = [event for event in found if event["event_type"] == event_type]
        return JSONResponse(_dedupe_by_prompt(found) if triplet else found)


def add_rollout_routes(app: FastAPI, state: GatewayState) -> None:
    """Register `/api/rollouts...`, each behind the admin key, with their bodies and answers declared."""
    routes = _RolloutRoutes(state)
    api = APIRouter(prefix="/api/rollouts", route_class=_admin_route_class(state), tags=["rollouts (v1.0)"])
    ok: dict[int | str, dict[str, Any]] = {401: {"description": "missing or wrong admin key"},
                                           422: {"description": "invalid request; `detail` names the field"}}  # fmt: skip
    found = {**ok, 404: {"description": "no such rollout"}}

    @api.post("", status_code=201, response_model=list[V1Rollout], responses=ok)
    async def create_rollouts(rollouts: list[RolloutCreate]) -> Response:
        """Create rollouts; a `rollout_id` already created returns that rollout unchanged."""
        return await routes.create(rollouts)

    @api.get("", response_model=list[V1Rollout], responses=ok)
    async def list_rollouts(state_in: Annotated[list[V1State], Query()], limit: Int64 = 500) -> Response:
        return await routes.list(state_in, limit)

    @api.get("/terminal", response_model=TerminalPage, responses=ok)
    async def terminal_rollouts(after: Int64 = 0, limit: Int64 = 1000) -> Response:
        return await routes.terminal(after, limit)

    @api.get("/{rollout_id}", response_model=RolloutDetail, responses=found)
    async def get_rollout(rollout_id: str) -> Response:
        return await routes.get(rollout_id)

    @api.patch("/{rollout_id}", response_model=V1Rollout, responses={**found, 409: {"description": "illegal move"}})
    async def patch_rollout(rollout_id: str, body: RolloutPatch) -> Response:
        return await routes.patch(rollout_id, body)

    @api.delete("/{rollout_id}", status_code=204, response_class=Response, responses=ok)
    async def delete_rollout(rollout_id: str) -> Response:
        return await routes.delete(rollout_id)

    @api.get("/{rollout_id}/events", response_model=list[V1Event], responses=found)
    async def rollout_events(
        rollout_id: str, event_type: Optional[str] = None, format: Optional[str] = None
    ) -> Response:
        return await routes.events(rollout_id, event_type, format)

    app.include_router(api)
