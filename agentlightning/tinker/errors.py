"""Errors the Tinker service answers with, in the shape the SDK reads (`RequestFailedResponse`)."""

from __future__ import annotations

from typing import Any, Dict

__all__ = ["TinkerError", "TinkerUserError", "TinkerNotFound", "TinkerGone", "error_body"]


class TinkerError(Exception):
    """A request the service cannot serve; `status` is the HTTP status, `category` the Tinker error category."""

    status = 400
    category = "user"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class TinkerUserError(TinkerError, ValueError):
    """Bad input from the caller (HTTP 400, category "user")."""


class TinkerNotFound(TinkerError, LookupError):
    """An unknown session, model, checkpoint or future (HTTP 404)."""

    status = 404


class TinkerGone(TinkerError):
    """A finished session (HTTP 410: the SDK stops its heartbeat)."""

    status = 410


def error_body(message: str, category: str = "user") -> Dict[str, Any]:
    """`{"error", "category"}`: what the SDK shows for a failed request or future."""
    return {"error": message, "category": category}
