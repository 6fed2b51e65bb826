"""The one call that holds a server we ship to the store's standard: size limit, browser guard, validation.

`harden(app, ...)` puts on a Starlette/FastAPI app, outermost first:
- the browser guard (403 for a foreign `Origin`, a cross-site `Sec-Fetch-Site`, or a `Host` that is not
  a name of this machine: DNS rebinding), see `browser_guard`;
- the body size limit (413, answered once the client has sent its body), see `body_limit`;
- and, for FastAPI apps, request validation answered 400/422 with every bad field named, never a 500.
The slow-client deadlines are not middleware: they are the uvicorn protocol `launcher` serves every app with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from starlette.applications import Starlette

from .body_limit import BodySizeLimitMiddleware
from .browser_guard import BrowserGuardMiddleware, default_allowed_hosts
from .errors import ErrorShape, openai_error_body

__all__ = ["harden", "describe_validation_errors", "install_validation_answers", "parse_json_object"]


def describe_validation_errors(errors: Sequence[Any]) -> str:
    """`"input.0.content: Input should be a valid string; include: ..."`: each bad field with its problem."""
    parts: list[str] = []
    for error in errors:
        location = [str(part) for part in error.get("loc", ()) if part != "body"]
        parts.append(f"{'.'.join(location) or 'body'}: {error.get('msg', 'invalid')}")
    return "; ".join(parts)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object; ValueError saying what is wrong otherwise."""
    import json

    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"the request body is not JSON ({type(exc).__name__}: {exc})") from None
    if not isinstance(body, dict):
        raise ValueError(f"the request body must be a JSON object, got {type(body).__name__}")
    return body  # type: ignore[return-value]


def install_validation_answers(app: Any, error_shape: ErrorShape = openai_error_body, status: int = 400) -> None:
    """Answer FastAPI's request validation errors with `status`, naming every bad field."""
    from fastapi.exceptions import RequestValidationError
    from starlette.requests import Request
    from starlette.responses import Response

    async def invalid(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        message = f"invalid request: {describe_validation_errors(exc.errors())}"
        return Response(error_shape(status, message, "invalid_request_error"), status, media_type="application/json")

    app.add_exception_handler(RequestValidationError, invalid)


def harden(
    app: Starlette,
    *,
    max_body_size: int,
    allowed_hosts: Optional[Sequence[str]] = (),
    allowed_origins: Sequence[str] = (),
    error_shape: ErrorShape = openai_error_body,
    api_prefix: str = "/",
    size_hint: str = "",
    host_hint: str = "the server's `allowed_hosts`",
    origin_hint: str = "the server's `allowed_origins`",
) -> None:
    """Add the size limit and the browser guard to `app` (call it last: the guard must be outermost).

    `allowed_hosts`: names a request's `Host` may give besides IP addresses, localhost and this machine's
    name; `"*"` any; None skips the check (a server whose every route needs a key: a rebound page has no
    key to send). `allowed_origins`: web origins allowed besides the server's own (`"*"` any).
    `api_prefix`: paths where a cross-site `Sec-Fetch-Site` without `Origin` is refused too.
    """
    if max_body_size <= 0:
        raise ValueError(f"max_body_size must be a positive number of bytes, got {max_body_size}")
    app.add_middleware(
        BodySizeLimitMiddleware,  # type: ignore[arg-type]
        max_body_size=max_body_size,
        hint=size_hint,
        error_shape=error_shape,
    )
    hosts = None if allowed_hosts is None or "*" in allowed_hosts else default_allowed_hosts(allowed_hosts)
    app.add_middleware(
        BrowserGuardMiddleware,  # type: ignore[arg-type]
        allowed_hosts=hosts,
        allowed_origins=tuple(allowed_origins),
        api_prefix=api_prefix,
        error_shape=error_shape,
        hint=host_hint,
        origin_hint=origin_hint,
    )
