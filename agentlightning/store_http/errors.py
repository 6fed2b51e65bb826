"""How store errors travel over HTTP: status codes and JSON bodies on the server, exceptions on the client.

Server side, a `StateConflictError` from the store (a refused transition, a stale attempt) becomes 409,
another `ValueError` 400, a `KeyError` 404, `NotImplementedError` 501, a `StorageUnavailableError` (disk full,
read-only) 503 with its message, anything unexpected 500; every
error body is JSON `{"detail": str, "error_type": str}`. A 500 says only the exception type and an
`error_id`; the traceback goes to the server log under that id, never to the client (it would show
install paths and internals). The client turns them back into exceptions of the same family, so code
written against an in-process store behaves the same against a remote one.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any, Optional

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from agentlightning.store.base import StorageUnavailableError, UnknownEntityError
from agentlightning.store.transitions import ForbiddenTransitionError, StaleAttemptError, StateConflictError

__all__ = [
    "HTTPError",
    "NOT_FOUND_ERROR_TYPE",
    "error_body",
    "error_from_exception",
    "LightningStoreRequestError",
    "LightningStoreNotFoundError",
    "LightningStoreAuthError",
    "LightningStoreServerError",
    "LightningStoreUnavailableError",
    "LightningStoreNotSupportedError",
    "StoreResponseError",
    "exception_from_response",
]

logger = logging.getLogger(__name__)

# `error_type` of a 404 meaning "the store returned nothing" (the client maps it to None where the
# contract returns Optional), as opposed to a 404 raised from a KeyError or an unknown route.
NOT_FOUND_ERROR_TYPE = "NotFound"


class HTTPError(Exception):
    """Raised inside a route to answer with `status` and a JSON `detail`."""

    def __init__(self, status: int, detail: str, error_type: Optional[str] = None, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.error_type = error_type or {400: "ValueError", 404: "KeyError", 422: "ValidationError"}.get(
            status, "HTTPError"
        )
        self.extra = extra


def error_body(detail: str, error_type: str, **extra: Any) -> bytes:
    return json.dumps({"detail": detail, "error_type": error_type, **extra}, default=str).encode()


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc) or type(exc).__name__


def error_from_exception(exc: Exception) -> tuple[int, bytes]:
    """Status code and JSON body answering a request that raised `exc`."""
    if isinstance(exc, HTTPError):
        return exc.status, error_body(exc.detail, exc.error_type, **exc.extra)
    if isinstance(exc, NotImplementedError):
        return 501, error_body(_message(exc), "NotImplementedError")
    if isinstance(exc, KeyError):
        return 404, error_body(_message(exc), "KeyError")
    if isinstance(exc, StateConflictError):
        return 409, error_body(_message(exc), type(exc).__name__)
    if isinstance(exc, UnknownEntityError):  # still a ValueError for clients: the error type says so
        return 404, error_body(_message(exc), "ValueError")
    if isinstance(exc, ValueError):
        return 400, error_body(_message(exc), "ValueError")
    if isinstance(exc, StorageUnavailableError):  # disk full, read-only: the operator can fix it; say how
        return 503, error_body(_message(exc), "StorageUnavailableError")
    if isinstance(exc, OverflowError):  # a number the backend cannot store (SQL integers are 64-bit)
        return 422, error_body(f"a number in the request is out of range: {_message(exc)}", "ValidationError")
    error_id = uuid.uuid4().hex[:16]
    logger.error("unexpected error %s while serving a store request", error_id, exc_info=exc)
    return 500, error_body(
        f"internal error of the store server ({type(exc).__name__}); its log has the details under error id {error_id}",
        "InternalServerError",
        error_id=error_id,
    )


class StoreResponseError(aiohttp.ClientResponseError):
    """An error answer of the store server; also an `aiohttp.ClientResponseError`, as v0.3's client raised.

    So v0.3 code catching `aiohttp.ClientResponseError` (and reading `.status`, `.message`) keeps working,
    while each concrete class is also the builtin an in-process store raises (`ValueError`, `KeyError`...).
    """

    detail: str
    error_type: str

    def _set_response(self, status: int, detail: str, error_type: str, url: str = "", method: str = "") -> None:
        self.status = status
        self.detail = detail
        self.message = detail
        self.error_type = error_type
        self.headers = None
        self.history = ()
        self.request_info = aiohttp.RequestInfo(URL(url), method, CIMultiDictProxy(CIMultiDict()), URL(url))

    def __str__(self) -> str:
        return self.detail

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, detail={self.detail!r})"


class LightningStoreRequestError(StoreResponseError, ValueError):
    """The server rejected the request (4xx): bad arguments, unknown ids, malformed data."""

    def __init__(self, status: int, detail: str, error_type: str = "", url: str = "", method: str = "") -> None:
        ValueError.__init__(self, detail)
        self._set_response(status, detail, error_type, url, method)


class LightningStoreNotFoundError(StoreResponseError, KeyError):
    """The server reported a missing entity (404 from a `KeyError` in the store)."""

    def __init__(self, status: int, detail: str, error_type: str = "", url: str = "", method: str = "") -> None:
        KeyError.__init__(self, detail)
        self._set_response(status, detail, error_type, url, method)


class LightningStoreAuthError(StoreResponseError, PermissionError):
    """401/403: the server wants a valid bearer token (`auth_token=` or `AGL_STORE_TOKEN`)."""

    HINT = (
        "the client sends the token of auth_token= or env AGL_STORE_TOKEN; it must equal the server's "
        "(`agl store --auth-token` or AGL_STORE_TOKEN where the server runs)"
    )

    def __init__(self, status: int, detail: str, error_type: str = "", url: str = "", method: str = "") -> None:
        PermissionError.__init__(self, detail)
        self._set_response(status, detail, error_type, url, method)


class LightningStoreServerError(StoreResponseError, RuntimeError):
    """The server failed (5xx or 408) and retries did not help; `server_traceback` is the server's stack."""

    def __init__(
        self,
        status: int,
        detail: str,
        error_type: str = "",
        server_traceback: Optional[str] = None,
        url: str = "",
        method: str = "",
    ) -> None:
        RuntimeError.__init__(self, f"store server answered HTTP {status}: {detail}")
        self._set_response(status, detail, error_type, url, method)
        self.server_traceback = server_traceback

    def __str__(self) -> str:
        return f"store server answered HTTP {self.status}: {self.detail}"


class LightningStoreUnavailableError(ConnectionError, aiohttp.ClientOSError):
    """The store server did not answer (refused, reset, timed out) until the client's retry budget was spent.

    Also an `aiohttp.ClientOSError`, the family v0.3's client raised once its retries were over.
    """


class RemoteForbiddenTransitionError(ForbiddenTransitionError, LightningStoreRequestError):
    """409: the server's store refused a status change (see `transitions.ALLOWED_TRANSITIONS`)."""


class RemoteStaleAttemptError(StaleAttemptError, LightningStoreRequestError):
    """409: the server's store refused an update of a stale attempt."""


class RemoteStateConflictError(StateConflictError, LightningStoreRequestError):
    """409: another change the server's state machine refused."""


_CONFLICTS: dict[str, type[LightningStoreRequestError]] = {
    "ForbiddenTransitionError": RemoteForbiddenTransitionError,
    "StaleAttemptError": RemoteStaleAttemptError,
    "StateConflictError": RemoteStateConflictError,
}


class LightningStoreNotSupportedError(StoreResponseError, NotImplementedError):
    """501: the store behind the server does not support this operation."""

    def __init__(self, detail: str, url: str = "", method: str = "") -> None:
        NotImplementedError.__init__(self, detail)
        self._set_response(501, detail, "NotImplementedError", url, method)


def exception_from_response(status: int, body: bytes, url: str, method: str = "") -> Exception:
    """The exception a client raises for an error response (each one also an `aiohttp.ClientResponseError`)."""
    detail = ""
    error_type = ""
    server_traceback: Optional[str] = None
    try:
        payload = json.loads(body) if body else {}
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        raw_detail = payload.get("detail", "")
        detail = raw_detail if isinstance(raw_detail, str) else json.dumps(raw_detail)
        error_type = str(payload.get("error_type") or "")
        server_traceback = payload.get("traceback")
    else:
        detail = body[:500].decode("utf-8", "replace")
    detail = detail or f"HTTP {status} from {url}"
    if status == 501:
        return LightningStoreNotSupportedError(detail, url, method)
    if status == 409 and error_type in _CONFLICTS:
        return _CONFLICTS[error_type](status, detail, error_type, url, method)
    if status in (401, 403):
        if "AGL_STORE_TOKEN" not in detail:
            detail = f"{detail} ({LightningStoreAuthError.HINT})"
        return LightningStoreAuthError(status, f"{detail} [{url}]", error_type, url, method)
    if status >= 500 or status == 408:
        return LightningStoreServerError(status, detail, error_type, server_traceback, url, method)
    if status == 404 and error_type in ("KeyError", NOT_FOUND_ERROR_TYPE):
        return LightningStoreNotFoundError(status, detail, error_type, url, method)
    return LightningStoreRequestError(status, detail, error_type, url, method)
