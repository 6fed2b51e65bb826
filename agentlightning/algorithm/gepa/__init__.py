"""GEPA: reflective, Pareto-based prompt optimization built on the `gepa` package (extra `gepa`)."""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("gepa") is None:
    raise ImportError("GEPA needs the gepa package; install it with: pip install 'agentlightning[gepa]'")

from .adapter import Example, StoreAdapter  # noqa: E402
from .algorithm import GEPA  # noqa: E402
from .reflection import Budget, ReflectionModel, ReflectionUsage  # noqa: E402

__all__ = ["GEPA", "Example", "StoreAdapter", "Budget", "ReflectionModel", "ReflectionUsage"]
