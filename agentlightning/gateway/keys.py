"""Bearer keys of rollout attempts: an HMAC of the ids under the gateway's secret.

A key lets its holder call the model and post events for exactly one rollout attempt. Nothing is stored:
a restarted gateway (or another replica) with the same secret accepts the keys handed out before.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Optional

__all__ = ["attempt_key", "new_secret", "bearer_token", "key_matches"]

_KEY_PREFIX = "agl-"


def new_secret() -> str:
    """A fresh random secret for a gateway."""
    return secrets.token_hex(32)


def attempt_key(secret: str, rollout_id: str, attempt_id: str) -> str:
    """The bearer key of one rollout attempt."""
    if not secret:
        raise ValueError("the gateway secret must be a non-empty string")
    digest = hmac.new(secret.encode("utf-8"), f"{rollout_id}/{attempt_id}".encode(), hashlib.sha256)
    return _KEY_PREFIX + digest.hexdigest()[:48]


def bearer_token(headers: Mapping[str, str]) -> Optional[str]:
    """The token of an `Authorization: Bearer <token>` header (OpenAI clients send their api_key so)."""
    value = headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def key_matches(secret: str, rollout_id: str, attempt_id: str, token: Optional[str]) -> bool:
    """Whether `token` is the key of this rollout attempt (constant-time comparison)."""
    if token is None:
        return False
    return hmac.compare_digest(attempt_key(secret, rollout_id, attempt_id), token)
