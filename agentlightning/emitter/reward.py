"""Rewards as spans: emit them, and read them back from spans (including legacy formats)."""

from __future__ import annotations

import functools
import inspect
import json
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Optional, TypeVar, Union, cast

from agentlightning.semconv import (
    AGL_ANNOTATION,
    AGL_REWARD,
    LightningSpanAttributes,
    RewardAttributes,
    RewardPydanticModel,
)
from agentlightning.types import Attributes, SpanCoreFields, SpanLike

from ._tracer import log_emitted, resolve_tracer

__all__ = [
    "emit_reward",
    "reward_attributes",
    "get_reward_value",
    "get_rewards_from_span",
    "is_reward_span",
    "find_reward_spans",
    "find_final_reward",
    "reward",
]

PRIMARY_REWARD_NAME = "primary"
_PREFIX = LightningSpanAttributes.REWARD.value
_NAME = RewardAttributes.REWARD_NAME.value
_VALUE = RewardAttributes.REWARD_VALUE.value

F = TypeVar("F", bound=Callable[..., Any])


def _as_reward_value(value: Any, what: str) -> float:
    if isinstance(value, (bool, int, float)):
        return float(value)
    raise TypeError(f"{what} must be a number (float, int or bool), got {value!r} ({type(value).__name__})")


def _reward_dimensions(
    reward: Union[float, Mapping[str, float]], primary_key: Optional[str]
) -> list[tuple[str, float]]:
    if isinstance(reward, Mapping):
        if primary_key is None:
            raise ValueError(
                f"emit_reward got a dict of rewards {sorted(reward)} but no primary_key; pass "
                "primary_key=<the key that is the main reward>"
            )
        if primary_key not in reward:
            raise ValueError(f"primary_key {primary_key!r} is not one of the reward keys {sorted(reward)}")
        ordered = [(primary_key, reward[primary_key])] + [(k, v) for k, v in reward.items() if k != primary_key]
        return [(str(name), _as_reward_value(value, f"reward {name!r}")) for name, value in ordered]
    return [(PRIMARY_REWARD_NAME, _as_reward_value(reward, "reward"))]


def reward_attributes(reward: Union[float, Mapping[str, float]], *, primary_key: Optional[str] = None) -> Attributes:
    """The attributes of the span `emit_reward(reward, primary_key=...)` records (for writers without a tracer)."""
    attributes: Attributes = {}
    for i, (name, value) in enumerate(_reward_dimensions(reward, primary_key)):
        attributes[f"{_PREFIX}.{i}.{_NAME}"] = name
        attributes[f"{_PREFIX}.{i}.{_VALUE}"] = value
    return attributes


def emit_reward(
    reward: Union[float, Mapping[str, float]],
    *,
    primary_key: Optional[str] = None,
    attributes: Optional[Attributes] = None,
    propagate: bool = True,
) -> SpanCoreFields:
    """Record a reward as an `agentlightning.annotation` span.

    A number becomes one dimension named "primary"; a dict needs `primary_key`, which becomes dimension 0.
    Attributes are `agentlightning.reward.<i>.name` / `.value`.
    """
    span_attributes = reward_attributes(reward, primary_key=primary_key)
    if attributes:
        span_attributes = {**attributes, **span_attributes}
    tracer = resolve_tracer(propagate, "emit_reward")
    return log_emitted(tracer.create_span(AGL_ANNOTATION, attributes=span_attributes))


# ---- reading rewards back ----


def _attributes(span: SpanLike) -> Mapping[str, Any]:
    return span.attributes or {}


def _agl_rewards(attributes: Mapping[str, Any]) -> list[RewardPydanticModel]:
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
        if _VALUE in entry and isinstance(entry[_VALUE], (int, float)):
            rewards.append(RewardPydanticModel(name=str(entry.get(_NAME, index)), value=float(entry[_VALUE])))
    return rewards


def _legacy_reward(span: SpanLike) -> Optional[float]:
    attributes = _attributes(span)
    for key in ("agentops.task.output", "agentops.entity.output"):
        payload = attributes.get(key)
        if isinstance(payload, str):
            try:
                decoded = json.loads(payload)
            except ValueError:
                continue
            if isinstance(decoded, dict):
                decoded = cast(dict[str, Any], decoded)
                if decoded.get("type") == "reward" and isinstance(decoded.get("value"), (int, float)):
                    return float(decoded["value"])
    if span.name in (AGL_REWARD, AGL_ANNOTATION):
        value = attributes.get("reward")
        if isinstance(value, (int, float)):
            return float(value)
    return None


def get_rewards_from_span(span: SpanLike) -> list[RewardPydanticModel]:
    """Every reward dimension on the span, primary first (legacy formats give one "primary" dimension)."""
    rewards = _agl_rewards(_attributes(span))
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


# ---- deprecated decorator ----


def _emit_result(result: Any) -> None:
    if result is None:
        return
    emit_reward(_as_reward_value(result, "the value returned by a @reward function"))


def reward(fn: F) -> F:
    """Deprecated: wrap a reward function so its return value is emitted with `emit_reward`."""
    warnings.warn(
        "the @reward decorator is deprecated; call emit_reward(value) instead", DeprecationWarning, stacklevel=2
    )
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            result = await fn(*args, **kwargs)
            _emit_result(result)
            return result

        return cast(F, async_wrapper)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        _emit_result(result)
        return result

    return cast(F, wrapper)
