"""Adapters: turn a rollout's spans into what an algorithm consumes (triplets for RL, messages for APO/SFT)."""

from .base import Adapter, OtelTraceAdapter, TraceAdapter
from .messages import TraceToMessages
from .report import AdaptationReport
from .trajectory import ContinuityBreak, TrajectoryRow, TurnTokens, merge_turns, triplet_tokens
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
    "TurnTokens",
    "TrajectoryRow",
    "ContinuityBreak",
    "merge_turns",
    "triplet_tokens",
]
