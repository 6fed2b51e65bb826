"""Rewards as spans: emit them; the readers (legacy formats included) live in `agentlightning.attributes.rewards`."""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import warnings
from collections.abc import Mapping
from typing import Any, Awaitable, Callable, Optional, TypeVar, Union, cast

from agentlightning.attributes.rewards import (
    PRIMARY_REWARD_NAME,
    find_final_reward,
    find_reward_spans,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
)
from agentlightning.semconv import (
    AGL_ANNOTATION,
    LightningSpanAttributes,
    RewardAttributes,
)
from agentlightning.types import Attributes, SpanCoreFields

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
    "RewardTimeoutError",
    "reward_within",
]

_PREFIX = LightningSpanAttributes.REWARD.value
_NAME = RewardAttributes.REWARD_NAME.value
_VALUE = RewardAttributes.REWARD_VALUE.value

F = TypeVar("F", bound=Callable[..., Any])


def _as_reward_value(value: Any, what: str) -> float:
    """The reward as a float; NaN and infinity are refused, since no algorithm can learn from them."""
    if isinstance(value, (bool, int, float)):
        reward = float(value)
        if not math.isfinite(reward):
            raise ValueError(
                f"{what} must be a finite number, got {reward!r}: no reward span is recorded. Return or emit a "
                "finite value (or None to record no reward); a runner fails the attempt with this error"
            )
        return reward
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


# ---- timeouts ----


class RewardTimeoutError(TimeoutError):
    """The reward took longer than its limit; the runner records the attempt as a `reward` timeout."""

    timeout_location = "reward"
    """Read by the runner: where the timeout happened (`semconv.AGL_TIMEOUT_LOCATION`)."""


async def reward_within(timeout_s: float, compute: Union[Callable[..., Any], Awaitable[Any]], *args: Any) -> Any:
    """The reward `compute` returns (a coroutine, an async function or a function run in a thread), or
    `RewardTimeoutError` after `timeout_s` seconds: the attempt then fails as a timed-out reward, which
    algorithms discard instead of training on a reward of 0."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
    if inspect.isawaitable(compute):
        pending: Awaitable[Any] = compute
    elif inspect.iscoroutinefunction(compute):
        pending = compute(*args)
    else:
        pending = asyncio.to_thread(compute, *args)
    try:
        return await asyncio.wait_for(pending, timeout_s)
    except asyncio.TimeoutError as exc:
        raise RewardTimeoutError(f"the reward took longer than {timeout_s:g} s") from exc


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
