"""Identifier generation."""

from __future__ import annotations

import os

__all__ = ["generate_id"]


def generate_id(length: int) -> str:
    """Return `length` random hex characters (from `os.urandom`, as `uuid4` draws them).

    Every rollout and attempt takes one, so it is drawn directly rather than by hashing a uuid4.
    """
    if not 0 < length <= 40:
        raise ValueError(f"id length must be in 1..40, got {length}")
    return os.urandom((length + 1) // 2).hex()[:length]
