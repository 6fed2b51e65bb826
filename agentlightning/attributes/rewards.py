"""Reading rewards back from spans: `agentlightning.reward.<i>.*` attributes and the legacy formats.

Data only (semantic conventions plus span types), so the adapters read rewards without importing the
emitters; `agentlightning.emitter` re-exports these readers next to `emit_reward`.
"""

from __future__ import annotations

import ast
import json
import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any, Optional, cast

from agentlightning.semconv import (
    AGL_ANNOTATION,
    AGL_REWARD,
    LightningSpanAttributes,
    RewardAttributes,
    RewardPydanticModel,
)
from agentlightning.types import SpanLike

__all__ = [
    "PRIMARY_REWARD_NAME",
    "get_reward_value",
    "get_rewards_from_span",
    "is_reward_span",
    "find_reward_spans",
    "find_final_reward",
]

logger = logging.getLogger(__name__)

PRIMARY_REWARD_NAME = "primary"
_PREFIX = LightningSpanAttributes.REWARD.value
_NAME = RewardAttributes.REWARD_NAME.value
_VALUE = RewardAttributes.REWARD_VALUE.value


def _attributes(span: SpanLike) -> Mapping[str, Any]:
    return span.attributes or {}


# How stores keep a non-finite number in span attributes (see `agentlightning.store._finite`).
_NON_FINITE_STRINGS = ("NaN", "Infinity", "-Infinity")


def _reward_number(value: Any, where: str) -> Optional[float]:
    """A reward value as a float; None when it is not a number, or is NaN / infinite (logged: it counts as no reward)."""
    if isinstance(value, (int, float)):
        if math.isfinite(value):
            return float(value)
    elif value not in _NON_FINITE_STRINGS:
        return None
    logger.warning("%s holds a non-finite reward (%r); it counts as no reward", where, value)
    return None


def _agl_rewards(attributes: Mapping[str, Any], span_name: str) -> list[RewardPydanticModel]:
    by_index: dict[int, dict[str, Any]] = {}
    dotted = _PREFIX + "."
    for key, value in attributes.items():
        if not key.startswith(dotted):
            continue
        index, _, field = key[len(dotted) :].partition(".")
        if index.isdigit() and field in (_NAME, _VALUE):
            by_index.setdefault(int(index), {})[field] = value
    rewards: list[RewardPydanticModel] = []
    for index in sorted(by_index):
        entry = by_index[index]
        if _VALUE not in entry:
            continue
        value = _reward_number(entry[_VALUE], f"reward {index} of span {span_name!r}")
        if value is not None:
            rewards.append(RewardPydanticModel(name=str(entry.get(_NAME, index)), value=value))
    return rewards


_AGENTOPS_OUTPUT_KEYS = ("agentops.task.output", "agentops.entity.output")


def _decode_payload(payload: Any) -> Any:
    """An AgentOps output attribute as a Python value: JSON text (possibly encoded twice), or a Python
    literal (`str(dict)`), or already a mapping."""
    for _ in range(2):  # AgentOps' safe_serialize may JSON-encode an already encoded string once more
        if not isinstance(payload, str):
            break
        try:
            payload = json.loads(payload)
        except ValueError:
            try:
                payload = ast.literal_eval(payload)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
    return payload


def _agentops_reward(attributes: Mapping[str, Any], span_name: str) -> Optional[float]:
    """A reward recorded in AgentOps format: `{"type": "reward", "value": x}` as the task/entity output,
    whole or flattened into `<key>.type` / `<key>.value` attributes."""
    for key in _AGENTOPS_OUTPUT_KEYS:
        decoded = _decode_payload(attributes.get(key))
        if decoded is None and attributes.get(f"{key}.type") == "reward":
            decoded = {"type": "reward", "value": attributes.get(f"{key}.value")}
        if isinstance(decoded, Mapping):
            decoded = cast(Mapping[str, Any], decoded)
            value = decoded.get("value")
            if decoded.get("type") == "reward" and not isinstance(value, bool):
                number = _reward_number(value, f"AgentOps reward of span {span_name!r}")
                if number is not None:
                    return number
    return None


def _legacy_reward(span: SpanLike) -> Optional[float]:
    attributes = _attributes(span)
    agentops = _agentops_reward(attributes, span.name)
    if agentops is not None:
        return agentops
    if span.name in (AGL_REWARD, AGL_ANNOTATION):
        return _reward_number(attributes.get("reward"), f"reward of span {span.name!r}")
    return None


def get_rewards_from_span(span: SpanLike) -> list[RewardPydanticModel]:
    """Every reward dimension on the span, primary first (legacy formats give one "primary" dimension)."""
    rewards = _agl_rewards(_attributes(span), span.name)
    if rewards:
        return rewards
    legacy = _legacy_reward(span)
    return [RewardPydanticModel(name=PRIMARY_REWARD_NAME, value=legacy)] if legacy is not None else []


def get_reward_value(span: SpanLike) -> Optional[float]:
    """The primary reward of a span, or None when it carries no reward."""
    rewards = get_rewards_from_span(span)
    return rewards[0].value if rewards else None


def is_reward_span(span: SpanLike) -> bool:
    return get_reward_value(span) is not None


def find_reward_spans(spans: Iterable[SpanLike]) -> list[SpanLike]:
    return [span for span in spans if is_reward_span(span)]


def find_final_reward(spans: Iterable[SpanLike]) -> Optional[float]:
    """The primary reward of the last reward span in list order, or None when there is none."""
    final: Optional[float] = None
    for span in spans:
        value = get_reward_value(span)
        if value is not None:
            final = value
    return final
