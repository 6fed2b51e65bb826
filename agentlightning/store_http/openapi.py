"""The OpenAPI document of the store server, matching what the routes really accept and answer.

Routes parse their bodies themselves (one validation, straight from bytes), so FastAPI cannot see
them: each route names its body with `json_body(...)`, and `store_openapi` adds those schemas, the
error body every failure answers with, and the error status codes each route can return.
"""

from __future__ import annotations

from typing import Any, Optional

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

from agentlightning.store.utils import SORTABLE_FIELDS
from agentlightning.types.core import ATTEMPT_STATUSES, ROLLOUT_MODES, ROLLOUT_STATUSES, WORKER_STATUSES

__all__ = ["ERROR_BODY_SCHEMA", "json_body", "document_parameter", "store_openapi"]

_REF = "#/components/schemas/{model}"
# Component schemas of the request bodies named by `json_body`, filled as routers are built.
_BODY_SCHEMAS: dict[str, dict[str, Any]] = {}

ERROR_BODY_SCHEMA: dict[str, Any] = {
    "title": "ErrorBody",
    "type": "object",
    "required": ["detail", "error_type"],
    "properties": {
        "detail": {"type": "string", "description": "what was wrong, naming the bad value and the fix"},
        "error_type": {"type": "string", "description": "ValueError, KeyError, NotFound, ValidationError, ..."},
        "error_id": {"type": "string", "description": "500 only: the id under which the server logged the error"},
    },
}

# Answers any store route may give besides its success: the error body says which.
_COMMON_ERRORS = {
    "400": "invalid argument (the detail names it)",
    "401": "missing or invalid bearer token (servers started with one)",
    "404": "the rollout, attempt, resources or worker named does not exist",
    "413": "request body over the server's max_body_size",
    "422": "body or parameter of the wrong type or out of range",
    "500": "unexpected server error; the server log has it under error_id",
}
_STATE_ERRORS = {"409": "the attempt was superseded or the rollout already finished"}


def json_body(schema_type: Any, *, required: bool = True, name: Optional[str] = None) -> dict[str, Any]:
    """`openapi_extra` documenting a JSON request body of `schema_type` (a model or any type pydantic knows)."""
    title = name or getattr(schema_type, "__name__", None) or "Body"
    schema = TypeAdapter(schema_type).json_schema(ref_template=_REF, mode="validation")
    _BODY_SCHEMAS.update(schema.pop("$defs", {}))
    _BODY_SCHEMAS[title] = schema
    return {
        "requestBody": {
            "required": required,
            "content": {"application/json": {"schema": {"$ref": _REF.format(model=title)}}},
        }
    }


def _error_response(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF.format(model="ErrorBody")}}},
    }


# ---- what the server refuses beyond the types of its bodies and parameters ----

_INT64 = {"minimum": -(2**63), "maximum": 2**63 - 1}
_NO_NUL = {"pattern": "^[^\\u0000]*$"}  # ids and names a store writes may not hold NUL (PostgreSQL text cannot)
# Constraints by field name, wherever the field appears (query parameter or body property).
_BY_NAME: dict[str, dict[str, Any]] = {
    "filter_logic": {"enum": ["and", "or"]},
    "sort_order": {"enum": ["asc", "desc"]},
    "limit": {"minimum": -1, "maximum": _INT64["maximum"]},
    "offset": {"minimum": 0, "maximum": _INT64["maximum"]},
    "mode": {"enum": list(ROLLOUT_MODES)},
    "mode_in": {"items": {"enum": list(ROLLOUT_MODES)}},
}
# Constraints of one body's properties (beyond `_BY_NAME`), and those whose explicit null the server refuses.
_BODY_RULES: dict[str, dict[str, dict[str, Any]]] = {
    "QueryRolloutsBody": {
        "status_in": {"items": {"enum": list(ROLLOUT_STATUSES)}},
        "status": {"items": {"enum": list(ROLLOUT_STATUSES)}},
        "sort_by": {"enum": list(SORTABLE_FIELDS["rollout"])},
    },
    "QueryAttemptsBody": {"sort_by": {"enum": list(SORTABLE_FIELDS["attempt"])}},
    "QuerySpansBody": {"sort_by": {"enum": list(SORTABLE_FIELDS["span"])}},
    "QueryWorkersBody": {
        "status_in": {"items": {"enum": list(WORKER_STATUSES)}},
        "sort_by": {"enum": list(SORTABLE_FIELDS["worker"])},
    },
    "UpdateRolloutBody": {"status": {"enum": list(ROLLOUT_STATUSES)}, "resources_id": _NO_NUL},
    "UpdateAttemptBody": {"status": {"enum": list(ATTEMPT_STATUSES)}, "worker_id": _NO_NUL},
    "FinishAttemptBody": {"status": {"enum": list(ATTEMPT_STATUSES)}},
    "DequeueBody": {"limit": _INT64, "wait": {"minimum": 0}, "worker_id": _NO_NUL},
    "WaitBody": {"timeout": {"minimum": 0}},
    "StartRolloutBody": {"resources_id": _NO_NUL, "worker_id": _NO_NUL},
    "StartAttemptBody": {"worker_id": _NO_NUL},
    "EnqueueRolloutRequest": {"resources_id": _NO_NUL},
    "Span": {
        "sequence_id": _INT64,
        **{f: _NO_NUL for f in ("rollout_id", "attempt_id", "trace_id", "span_id", "name")},
    },
}
_BODY_RULES["SpanInput"] = _BODY_RULES["Span"]
_NOT_NULL: dict[str, tuple[str, ...]] = {
    "UpdateRolloutBody": ("status", "config"),
    "UpdateAttemptBody": ("status", "last_heartbeat_time", "metadata"),
    "UpdateWorkerBody": ("heartbeat_stats",),
}
# Query parameters whose values depend on the route: the entity a `sort_by` / `status_in` belongs to.
_ROUTE_ENTITY = {
    "/v1/agl/rollouts": "rollout",
    "/v1/agl/dashboard/rollouts": "rollout",
    "/v1/agl/rollouts/{rollout_id}/attempts": "attempt",
    "/v1/agl/spans": "span",
    "/v1/agl/workers": "worker",
    "/v1/agl/dashboard/workers": "worker",
    "/v1/agl/resources": "resources",
}
_STATUSES = {"rollout": ROLLOUT_STATUSES, "worker": WORKER_STATUSES}
# Rules routers outside this package declare for their own query parameters (see `document_parameter`).
_PARAMETER_RULES: dict[tuple[str, str], dict[str, Any]] = {}


def document_parameter(path: str, name: str, **rule: Any) -> None:
    """Declare what the route at `path` accepts for query parameter `name` (JSON Schema keywords, e.g. `enum`)."""
    _PARAMETER_RULES[(path, name)] = rule


def _narrow(schema: dict[str, Any], extra: dict[str, Any]) -> None:
    """Add `extra` to `schema`, or to each non-null branch of an `anyOf`; `items` goes into array items."""
    branches = [b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"]
    for branch in branches:
        for key, value in extra.items():
            if key == "items":
                branch.setdefault("items", {}).update(value)
            else:
                branch[key] = value


def _constrain_bodies(schemas: dict[str, Any]) -> None:
    for name, schema in schemas.items():
        properties: dict[str, Any] = schema.get("properties", {})
        rules = {**{k: v for k, v in _BY_NAME.items() if k in properties}, **_BODY_RULES.get(name, {})}
        for field, extra in rules.items():
            if field in properties:
                _narrow(properties[field], extra)
        for field in _NOT_NULL.get(name, ()):
            prop = properties[field]
            if "anyOf" in prop:
                kept = [b for b in prop.pop("anyOf") if b.get("type") != "null"]
                prop.update(kept[0] if len(kept) == 1 else {"anyOf": kept})
            prop.pop("default", None)
        resource_type = properties.get("resource_type")
        if resource_type is not None and "const" in resource_type:  # the discriminator of a resource
            schema["required"] = sorted({*schema.get("required", []), "resource_type"})


def _constrain_parameters(path: str, operation: dict[str, Any]) -> None:
    entity = _ROUTE_ENTITY.get(path)
    for parameter in operation.get("parameters", []):
        if parameter.get("in") != "query":
            continue
        name, schema = parameter["name"], parameter.setdefault("schema", {})
        if (path, name) in _PARAMETER_RULES:
            _narrow(schema, _PARAMETER_RULES[(path, name)])
        elif name in _BY_NAME:
            rule = dict(_BY_NAME[name])
            if "minimum" in rule and "minimum" in schema:  # the tighter bounds win (a route may declare its own)
                rule["minimum"] = max(rule["minimum"], schema["minimum"])
                rule["maximum"] = min(rule["maximum"], schema.get("maximum", rule["maximum"]))
            _narrow(schema, rule)
        elif name == "sort_by" and entity is not None:
            _narrow(schema, {"enum": list(SORTABLE_FIELDS[entity])})
        elif name == "status_in" and entity in _STATUSES:
            _narrow(schema, {"items": {"enum": list(_STATUSES[entity])}})


def store_openapi(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (built once), with request bodies, the error body and error status codes."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in _BODY_SCHEMAS.items():
        schemas.setdefault(name, schema)
    schemas["ErrorBody"] = ERROR_BODY_SCHEMA
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    _constrain_bodies(schemas)
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            _constrain_parameters(path, operation)
            errors = dict(_COMMON_ERRORS)
            if method == "post" and path.startswith(("/v1/agl/rollouts", "/v1/agl/spans")):
                errors.update(_STATE_ERRORS)
            if path in ("/v1/traces", "/v1/logs"):  # the OTLP routes read protobuf or JSON only
                errors["415"] = "unsupported Content-Type or Content-Encoding"
            responses: dict[str, Any] = operation.setdefault("responses", {})
            for status, description in errors.items():
                responses[status] = _error_response(description)
    app.openapi_schema = document
    return document
