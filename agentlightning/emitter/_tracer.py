"""Which tracer an emitter writes through, and how emitters turn user attributes into span attributes."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Optional

from agentlightning.attributes.otel import flatten_attributes, sanitize_attributes
from agentlightning.env_var import LightningEnvVar, resolve_bool_env_var
from agentlightning.tracer.base import Tracer, get_active_tracer
from agentlightning.tracer.dummy import DummyTracer
from agentlightning.types import Attributes, SpanCoreFields

__all__ = ["resolve_tracer", "log_emitted", "extra_attributes"]

logger = logging.getLogger("agentlightning.emitter")

_dummy_tracer = DummyTracer()


def resolve_tracer(propagate: bool, emitter: str) -> Tracer:
    """The active tracer when propagating (RuntimeError if none), else a backend-less DummyTracer."""
    if not propagate:
        return _dummy_tracer
    tracer = get_active_tracer()
    if tracer is None:
        raise RuntimeError(
            f"{emitter}() found no active tracer; call it inside a tracer's trace_context (the runner opens "
            "one around each rollout), or pass propagate=False to only build the span fields"
        )
    return tracer


def extra_attributes(attributes: Optional[Mapping[str, Any]]) -> Attributes:
    """User attributes as span attributes, as v0.3: nested dicts and lists of objects flattened into dotted
    keys, lists of one primitive type kept whole, anything else JSON-encoded."""
    if not attributes:
        return {}
    if not isinstance(attributes, Mapping):  # type: ignore[redundant-expr]
        raise TypeError(f"attributes must be a dict, got {type(attributes).__name__}")
    return sanitize_attributes(flatten_attributes(attributes, expand_leaf_lists=False))


def log_emitted(core: SpanCoreFields) -> SpanCoreFields:
    """Log the emitted span when AGL_EMITTER_DEBUG is on."""
    if resolve_bool_env_var(LightningEnvVar.AGL_EMITTER_DEBUG, fallback=False):
        logger.info("emitted span %s: %s", core.name, core.attributes)
    return core
