"""Events an agent posts for its rollout attempt, turned into the spans our emitters would record.

`{"event_type": "reward", "data": {"value": 0.7}}` becomes exactly the span of `emit_reward(0.7)`
(a dict value needs `data.primary_key`, as `emit_reward` does). Any other event type becomes an
annotation span carrying its data (flattened like `emit_annotation`) and `agentlightning.event_type`.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentlightning.attributes.otel import flatten_attributes, sanitize_attributes
from agentlightning.emitter.reward import reward_attributes
from agentlightning.semconv import AGL_ANNOTATION, LightningResourceAttributes
from agentlightning.types import AUTO_SEQUENCE_ID, Attributes, OtelResource, Span

__all__ = ["GatewayEvent", "parse_event", "event_span", "REWARD_EVENT", "EVENT_TYPE_ATTRIBUTE", "GATEWAY_TRACER_NAME"]

REWARD_EVENT = "reward"
EVENT_TYPE_ATTRIBUTE = "agentlightning.event_type"
GATEWAY_TRACER_NAME = "agentlightning.gateway"


class GatewayEvent(BaseModel):
    """Body of `POST /rollouts/{rollout_id}/attempt/{attempt_id}/events`."""

    model_config = ConfigDict(extra="forbid")

    event_type: str = Field(min_length=1, max_length=200)
    data: dict[str, Any] = Field(default_factory=dict)


def parse_event(body: Any) -> GatewayEvent:
    """Validate an event body; ValueError with a readable message when it is malformed."""
    if not isinstance(body, dict):
        raise ValueError(f"the event must be a JSON object {{event_type, data}}, got {type(body).__name__}")
    try:
        event = GatewayEvent.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}" for error in exc.errors()
        )
        raise ValueError(f"bad event: {problems}") from None
    if event.event_type == REWARD_EVENT:
        _reward_of(event)  # validated now so a bad reward is a 422, not a stored span
    return event


def _reward_of(event: GatewayEvent) -> Attributes:
    data = event.data
    if "value" not in data:
        raise ValueError('a reward event needs data.value, e.g. {"event_type": "reward", "data": {"value": 0.7}}')
    value = data["value"]
    primary_key = data.get("primary_key")
    unknown = sorted(set(data) - {"value", "primary_key"})
    if unknown:
        raise ValueError(f"a reward event takes only data.value and data.primary_key, got also {unknown}")
    if primary_key is not None and not isinstance(primary_key, str):
        raise ValueError(f"data.primary_key must be a string, got {primary_key!r}")
    if isinstance(value, dict):
        for name, item in value.items():  # type: ignore[union-attr]
            if isinstance(item, bool) or not isinstance(item, (int, float)):
                raise ValueError(f"reward {name!r} must be a number, got {item!r}")
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"data.value must be a number (or a dict of numbers with primary_key), got {value!r}")
    try:
        return reward_attributes(value, primary_key=primary_key)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None


def _event_attributes(event: GatewayEvent) -> Attributes:
    if event.event_type == REWARD_EVENT:
        return _reward_of(event)
    attributes = sanitize_attributes(flatten_attributes(event.data, expand_leaf_lists=False)) if event.data else {}
    attributes[EVENT_TYPE_ATTRIBUTE] = event.event_type
    return attributes


def event_span(event: GatewayEvent, rollout_id: str, attempt_id: str) -> Span:
    """The span recording `event` (`AUTO_SEQUENCE_ID`: the store assigns the next one)."""
    moment = time.time()
    resource = OtelResource(
        attributes={
            LightningResourceAttributes.ROLLOUT_ID.value: rollout_id,
            LightningResourceAttributes.ATTEMPT_ID.value: attempt_id,
            LightningResourceAttributes.TRACER_NAME.value: GATEWAY_TRACER_NAME,
        }
    )
    return Span.from_attributes(
        attributes=_event_attributes(event),
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=AUTO_SEQUENCE_ID,
        name=AGL_ANNOTATION,
        start_time=moment,
        end_time=moment,
        resource=resource,
    )
