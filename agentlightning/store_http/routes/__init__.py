"""The store's REST API, one router per noun, plus OTLP/HTTP trace ingestion.

Routers are stateless (each app carries its store in `app.state`), so one set serves every app.
"""

from __future__ import annotations

import threading
from typing import Optional

from fastapi import APIRouter

from .attempts import build_attempts_router
from .otlp import build_otlp_router
from .resources import build_resources_router
from .rollouts import WAIT_CAP_SECONDS, WAIT_COMPLETE_HEADER, build_rollouts_router
from .spans import build_spans_router
from .statistics import build_statistics_router
from .workers import build_workers_router

__all__ = ["WAIT_CAP_SECONDS", "WAIT_COMPLETE_HEADER", "store_routers"]

_ROUTERS: Optional[tuple[APIRouter, ...]] = None
_ROUTERS_LOCK = threading.Lock()


def store_routers() -> tuple[APIRouter, ...]:
    """Every router of the store API, built once per process: route setup costs far more than including it."""
    global _ROUTERS
    with _ROUTERS_LOCK:
        if _ROUTERS is None:
            _ROUTERS = (
                build_statistics_router(),
                build_rollouts_router(),
                build_attempts_router(),
                build_spans_router(),
                build_resources_router(),
                build_workers_router(),
                build_otlp_router(),
            )
        return _ROUTERS
