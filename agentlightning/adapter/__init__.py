"""Adapters: turn a rollout's spans into what an algorithm consumes (triplets for RL, messages for APO/SFT)."""

from .base import Adapter, OtelTraceAdapter, TraceAdapter
from .messages import TraceToMessages
from .report import AdaptationReport
from .triplet import LlmProxyTraceToTriplet, TracerTraceToTriplet, TraceToTripletBase

__all__ = [
    "Adapter",
    "TraceAdapter",
    "OtelTraceAdapter",
    "TraceToTripletBase",
    "TracerTraceToTriplet",
    "LlmProxyTraceToTriplet",
    "TraceToMessages",
    "AdaptationReport",
]
