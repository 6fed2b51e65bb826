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

__all__ = ["ERROR_BODY_SCHEMA", "json_body", "store_openapi"]

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
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            errors = dict(_COMMON_ERRORS)
            if method == "post" and path.startswith(("/v1/agl/rollouts", "/v1/agl/spans")):
                errors.update(_STATE_ERRORS)
            if path == "/v1/traces":
                errors["415"] = "unsupported Content-Type or Content-Encoding"
            responses: dict[str, Any] = operation.setdefault("responses", {})
            for status, description in errors.items():
                responses[status] = _error_response(description)
    app.openapi_schema = document
    return document
