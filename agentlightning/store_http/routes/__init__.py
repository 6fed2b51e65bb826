"""The store's REST API, one router per noun, plus OTLP/HTTP trace ingestion.

Routers are stateless (each app carries its store in `app.state`), so one set serves every app.
"""

from __future__ import annotations

from fastapi import APIRouter

from . import attempts, otlp, resources, rollouts, spans, statistics, workers
from .rollouts import WAIT_CAP_SECONDS, WAIT_COMPLETE_HEADER

__all__ = ["WAIT_CAP_SECONDS", "WAIT_COMPLETE_HEADER", "store_routers"]


def store_routers() -> tuple[APIRouter, ...]:
    """Every router of the store API, in the order the app serves them (built once, at import)."""
    return (
        statistics.router,
        rollouts.router,
        attempts.router,
        spans.router,
        resources.router,
        workers.router,
        otlp.router,
    )
