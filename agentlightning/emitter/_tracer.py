"""Which tracer an emitter writes through."""

from __future__ import annotations

import logging

from agentlightning.env_var import LightningEnvVar, resolve_bool_env_var
from agentlightning.tracer.base import Tracer, get_active_tracer
from agentlightning.tracer.dummy import DummyTracer
from agentlightning.types import SpanCoreFields

__all__ = ["resolve_tracer", "log_emitted"]

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


def log_emitted(core: SpanCoreFields) -> SpanCoreFields:
    """Log the emitted span when AGL_EMITTER_DEBUG is on."""
    if resolve_bool_env_var(LightningEnvVar.AGL_EMITTER_DEBUG, fallback=False):
        logger.info("emitted span %s: %s", core.name, core.attributes)
    return core
