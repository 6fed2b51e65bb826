"""v1.0's rollouts REST (`/api/rollouts...`), served by the gateway on top of our store.

For a v1.0 trainer or controller pointed at our gateway. What differs from v1.0, and why:

- Rollouts are store rollouts: `POST /api/rollouts` enqueues them (`is_train` -> mode train/val,
  `config.timeout_seconds` -> the rollout's timeout), so our runners (e.g. with `ProcessAgent`) run them. A
  `rollout_id` chosen by the client is kept as an alias (in `metadata.v1.rollout_id` and in the gateway's
  memory); every route accepts it or the store's id, and answers with the alias.
- States: ours map onto v1.0's four (`queuing`/`requeuing` -> queuing, `preparing`/`running` -> running,
  `succeeded`, `failed`/`cancelled` -> failed). PATCH enforces v1.0's transitions (409 otherwise).
- `DELETE` cancels a rollout that is not finished and hides it from these routes; the store keeps its spans.
- Events are the spans of the rollout's latest attempt: LLM calls as `model_request`, rewards as `reward`,
  posted events under their `event_type`. `format=triplet` trims them as v1.0 does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, Optional

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentlightning.adapter.extraction import logprobs_of, prompt_token_ids_of, response_token_ids_of
from agentlightning.attributes.rewards import get_reward_value, is_reward_span
from agentlightning.semconv import RAW_GEN_AI_REQUEST
from agentlightning.store.transitions import ForbiddenTransitionError
from agentlightning.types import Rollout, RolloutConfig, Span

from .events import EVENT_TYPE_ATTRIBUTE
from .state import GatewayState

__all__ = ["add_rollout_routes", "v1_state"]

V1State = Literal["queuing", "running", "succeeded", "failed"]
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


class RolloutCreate(BaseModel):
    input: Any
    is_train: bool = True
    config: Optional[dict[str, Any]] = None
    metadata: Optional[dict[str, Any]] = None
    rollout_id: Optional[str] = Field(default=None, min_length=1)


class StatusPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: Optional[V1State] = None
    k8s_job_name: Optional[str] = None
    last_attempt_id: Optional[str] = None
    error_message: Optional[str] = None


class RolloutPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Optional[StatusPatch] = None


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


class _RolloutRoutes:
    """The handlers, over the gateway's store; client-chosen ids are aliases of store ids (kept in memory)."""

    def __init__(self, state: GatewayState) -> None:
        self.store = state.directory.store
        self.aliases: dict[str, str] = {}

    async def find(self, rollout_id: str) -> Optional[Rollout]:
        rollout = await self.store.get_rollout_by_id(self.aliases.get(rollout_id, rollout_id))
        if rollout is None or _v1_meta(rollout).get("deleted"):
            return None
        return rollout

    @staticmethod
    def not_found(rollout_id: str) -> JSONResponse:
        return JSONResponse({"detail": f"Rollout not found: {rollout_id}"}, status_code=404)

    async def create(self, request: Request) -> Response:
        body = await request.json()
        if not isinstance(body, list):
            return JSONResponse({"detail": "the body must be a JSON array of rollouts"}, status_code=422)
        created: list[dict[str, Any]] = []
        for raw in body:  # type: ignore[reportUnknownVariableType]
            item = RolloutCreate.model_validate(raw)
            existing = await self.find(item.rollout_id) if item.rollout_id else None
            if existing is None:
                config = {"timeout_seconds": _DEFAULT_TIMEOUT, "local": None, "k8s": None, **(item.config or {})}
                meta = {"rollout_id": item.rollout_id, "config": config, "metadata": item.metadata or {}, "version": 1}
                existing = await self.store.enqueue_rollout(
                    input=item.input,
                    mode="train" if item.is_train else "val",
                    config=RolloutConfig(timeout_seconds=float(config["timeout_seconds"])),
                    metadata={"v1": meta},
                )
                if item.rollout_id:
                    self.aliases[item.rollout_id] = existing.rollout_id
            created.append(_as_v1(existing))
        return JSONResponse(created, status_code=201)

    async def list(self, request: Request) -> Response:
        states = request.query_params.getlist("state_in")
        bad = [s for s in states if s not in _OURS]
        if not states or bad:
            detail = f"state_in is required, one or more of {sorted(_OURS)} (got {states})"
            return JSONResponse({"detail": detail}, status_code=422)
        limit = int(request.query_params.get("limit", 500))
        ours = [status for s in states for status in _OURS[s]]
        page = await self.store.query_rollouts(status_in=ours, sort_by="start_time", sort_order="asc")  # type: ignore[arg-type]
        found = [_as_v1(r) for r in page.items if not _v1_meta(r).get("deleted")]
        return JSONResponse(found[: max(limit, 0)])

    async def terminal(self, request: Request) -> Response:
        after = max(0, int(request.query_params.get("after", 0)))
        limit = max(1, int(request.query_params.get("limit", 1000)))
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

    async def get(self, request: Request) -> Response:
        rollout_id = request.path_params["rollout_id"]
        rollout = await self.find(rollout_id)
        if rollout is None:
            return self.not_found(rollout_id)
        attempts = await self.store.query_attempts(rollout.rollout_id)
        return JSONResponse({"rollout": _as_v1(rollout), "attempts": [a.attempt_id for a in attempts]})

    async def patch(self, request: Request) -> Response:
        rollout_id = request.path_params["rollout_id"]
        rollout = await self.find(rollout_id)
        if rollout is None:
            return self.not_found(rollout_id)
        changes = RolloutPatch.model_validate(await request.json()).status
        sent = changes.model_dump(exclude_unset=True) if changes is not None else {}
        if not sent:
            return JSONResponse(_as_v1(rollout))
        meta = _v1_meta(rollout)
        current = v1_state(rollout.status)
        new_state = sent.pop("state", None)
        if new_state is not None and new_state not in _TRANSITIONS.get(current, set()):
            detail = f"Rollout {rollout_id}: cannot transition {current} -> {new_state}"
            return JSONResponse({"detail": detail}, status_code=409)
        meta.update(sent, version=int(meta.get("version") or 1) + 1, updated_at=time.time())
        metadata = {**(rollout.metadata or {}), "v1": meta}
        if new_state is None:
            return JSONResponse(_as_v1(await self.store.update_rollout(rollout.rollout_id, metadata=metadata)))
        # The store's rollouts start running through `preparing` (claimed, no span yet): v1.0's `running`.
        ours = "preparing" if new_state == "running" else new_state
        try:
            rollout = await self.store.update_rollout(rollout.rollout_id, status=ours, metadata=metadata)
        except ForbiddenTransitionError as exc:
            return JSONResponse({"detail": f"Rollout {rollout_id}: {exc}"}, status_code=409)
        return JSONResponse(_as_v1(rollout))

    async def delete(self, request: Request) -> Response:
        rollout_id = request.path_params["rollout_id"]
        rollout = await self.find(rollout_id)
        if rollout is not None:
            metadata = {**(rollout.metadata or {}), "v1": {**_v1_meta(rollout), "deleted": True}}
            if v1_state(rollout.status) in ("queuing", "running"):
                await self.store.update_rollout(rollout.rollout_id, status="cancelled", metadata=metadata)
            else:
                await self.store.update_rollout(rollout.rollout_id, metadata=metadata)
            self.aliases.pop(rollout_id, None)
        return Response(status_code=204)

    async def events(self, request: Request) -> Response:
        rollout_id = request.path_params["rollout_id"]
        rollout = await self.find(rollout_id)
        if rollout is None:
            return self.not_found(rollout_id)
        triplet = request.query_params.get("format") == "triplet"
        wanted = request.query_params.get("event_type")
        spans = await self.store.query_spans(rollout.rollout_id, "latest")
        found = [event for span in spans if (event := _span_event(span, triplet)) is not None]
        if wanted is not None:
            found = [event for event in found if event["event_type"] == wanted]
        return JSONResponse(_dedupe_by_prompt(found) if triplet else found)


def add_rollout_routes(app: FastAPI, state: GatewayState, guarded: Callable[[Any], Any]) -> None:
    """Register `/api/rollouts...` (each handler behind the admin key via `guarded`)."""
    routes = _RolloutRoutes(state)
    app.add_route("/api/rollouts", guarded(routes.create), methods=["POST"])
    app.add_route("/api/rollouts", guarded(routes.list), methods=["GET"])
    app.add_route("/api/rollouts/terminal", guarded(routes.terminal), methods=["GET"])
    app.add_route("/api/rollouts/{rollout_id}", guarded(routes.get), methods=["GET"])
    app.add_route("/api/rollouts/{rollout_id}", guarded(routes.patch), methods=["PATCH"])
    app.add_route("/api/rollouts/{rollout_id}", guarded(routes.delete), methods=["DELETE"])
    app.add_route("/api/rollouts/{rollout_id}/events", guarded(routes.events), methods=["GET"])
