"""Identifier generation."""

from __future__ import annotations

import hashlib
import uuid

__all__ = ["generate_id"]


def generate_id(length: int) -> str:
    """Return `length` hex characters of sha1(uuid4)."""
    if not 0 < length <= 40:
        raise ValueError(f"id length must be in 1..40, got {length}")
    return hashlib.sha1(uuid.uuid4().bytes).hexdigest()[:length]
