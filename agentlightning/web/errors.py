"""Error bodies of the servers we ship: each server answers its refusals in the shape its clients read."""

from __future__ import annotations

import json
from typing import Callable

__all__ = ["ErrorShape", "openai_error_body", "detail_error_body"]

ErrorShape = Callable[[int, str, str], bytes]
"""`(status, message, error_type) -> JSON body` of a refusal."""


def openai_error_body(status: int, message: str, error_type: str) -> bytes:
    """`{"error": {"message", "type", "param", "code"}}`: what OpenAI (and Anthropic) clients parse."""
    return json.dumps({"error": {"message": message, "type": error_type, "param": None, "code": status}}).encode()


def detail_error_body(status: int, message: str, error_type: str) -> bytes:
    """`{"detail", "error_type"}`: the store server's (and FastAPI's) shape."""
    del status
    return json.dumps({"detail": message, "error_type": error_type}).encode()
