"""Rewards are annotation spans with `agentlightning.reward.<i>.name/value`; they can be read back."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

from agentlightning.emitter import (
    emit_reward,
    find_final_reward,
    find_reward_spans,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
    reward,
)
from agentlightning.semconv import RewardPydanticModel
from agentlightning.types import Span

from .conftest import Traced


async def test_float_reward_is_stored_as_primary_dimension(traced: Traced) -> None:
    async with traced.context():
        core = emit_reward(0.75)
    assert core.name == "agentlightning.annotation"
    (span,) = await traced.spans()
    assert span.name == "agentlightning.annotation"
    assert span.attributes == {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 0.75}
    assert get_reward_value(span) == 0.75
    assert is_reward_span(span)


def test_ints_and_bools_are_coerced_to_float() -> None:
    assert emit_reward(1, propagate=False).attributes["agentlightning.reward.0.value"] == 1.0
    assert emit_reward(True, propagate=False).attributes["agentlightning.reward.0.value"] == 1.0
    with pytest.raises(TypeError, match="number"):
        emit_reward("high", propagate=False)  # type: ignore[arg-type]


async def test_dict_reward_puts_the_primary_key_first(traced: Traced) -> None:
    async with traced.context():
        emit_reward({"format": 0.5, "accuracy": 1.0, "length": 0.2}, primary_key="accuracy", attributes={"tag": "x"})
    (span,) = await traced.spans()
    assert get_rewards_from_span(span) == [
        RewardPydanticModel(name="accuracy", value=1.0),
        RewardPydanticModel(name="format", value=0.5),
        RewardPydanticModel(name="length", value=0.2),
    ]
    assert get_reward_value(span) == 1.0
    assert span.attributes["tag"] == "x"


def test_dict_reward_needs_a_valid_primary_key() -> None:
    with pytest.raises(ValueError, match="primary_key"):
        emit_reward({"a": 1.0}, propagate=False)
    with pytest.raises(ValueError, match="'b'"):
        emit_reward({"a": 1.0}, primary_key="b", propagate=False)


def test_emitting_without_an_active_tracer_raises() -> None:
    with pytest.raises(RuntimeError, match="no active tracer"):
        emit_reward(1.0)


def test_legacy_reward_formats_are_recognised() -> None:
    agentops_span = Span.from_attributes(
        attributes={"agentops.task.output": json.dumps({"type": "reward", "value": 0.3})}, name="task"
    )
    legacy_span = Span.from_attributes(attributes={"reward": 0.9}, name="agentlightning.reward")
    plain = Span.from_attributes(attributes={"reward": 0.9}, name="something.else")
    assert get_reward_value(agentops_span) == 0.3
    assert get_reward_value(legacy_span) == 0.9
    assert get_reward_value(plain) is None
    assert get_rewards_from_span(legacy_span) == [RewardPydanticModel(name="primary", value=0.9)]


def test_find_reward_spans_and_final_reward_follow_list_order() -> None:
    spans = [
        Span.from_core_fields(emit_reward(0.1, propagate=False), rollout_id="r", attempt_id="a", sequence_id=1),
        Span.from_attributes(name="llm", attributes={"x": 1}),
        Span.from_core_fields(emit_reward(0.7, propagate=False), rollout_id="r", attempt_id="a", sequence_id=3),
    ]
    assert find_reward_spans(spans) == [spans[0], spans[2]]
    assert find_final_reward(spans) == 0.7
    assert find_final_reward(spans[1:2]) is None


async def test_deprecated_reward_decorator_emits_the_return_value(traced: Traced) -> None:
    with pytest.warns(DeprecationWarning):

        @reward
        def score(answer: str) -> float:
            return 1.0 if answer == "42" else 0.0

        @reward
        async def ascore(answer: str) -> float:
            return 0.5

    async with traced.context():
        assert score("42") == 1.0
        assert await ascore("x") == 0.5
    assert [get_reward_value(s) for s in await traced.spans()] == [1.0, 0.5]


def test_deprecated_alias_module_warns() -> None:
    import importlib
    import sys

    sys.modules.pop("agentlightning.reward", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module("agentlightning.reward")
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert module.emit_reward is emit_reward


@pytest.mark.parametrize(
    "attributes",
    [
        {"agentops.task.output": json.dumps({"type": "reward", "value": 0.75})},
        {"agentops.entity.output": json.dumps({"type": "reward", "value": 0.75})},
        {"agentops.task.output": json.dumps(json.dumps({"type": "reward", "value": 0.75}))},  # encoded twice
        {"agentops.task.output": str({"type": "reward", "value": 0.75})},  # str(dict)
        {"agentops.entity.output.type": "reward", "agentops.entity.output.value": 0.75},  # flattened
    ],
    ids=["task-json", "entity-json", "double-json", "python-repr", "flattened"],
)
def test_agentops_format_rewards_are_found(attributes: dict[str, Any]) -> None:
    from opentelemetry.sdk.trace import TracerProvider

    span = Span.from_attributes(attributes=attributes, name="agentops.task")
    provider = TracerProvider()
    otel_span = provider.get_tracer("t").start_span("reward_fn.task", attributes=attributes)
    otel_span.end()
    other = Span.from_attributes(name="llm", attributes={"agentops.task.output": json.dumps({"type": "text"})})
    for candidate in (span, otel_span):
        assert get_reward_value(candidate) == 0.75  # type: ignore[arg-type]
        assert is_reward_span(candidate)  # type: ignore[arg-type]
    assert not is_reward_span(other)
    assert find_final_reward([span, other]) == 0.75
    assert find_final_reward([other]) is None


def test_agentops_outputs_that_are_not_rewards_are_ignored() -> None:
    for payload in ("not json {", json.dumps({"type": "reward", "value": "high"}), json.dumps([1, 2])):
        assert get_reward_value(Span.from_attributes(attributes={"agentops.task.output": payload})) is None
    assert (
        get_reward_value(
            Span.from_attributes(attributes={"agentops.task.output": json.dumps({"type": "reward", "value": True})})
        )
        is None
    )


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_rewards_are_refused_when_emitted(value: float) -> None:
    with pytest.raises(ValueError, match="reward must be a finite number"):
        emit_reward(value, propagate=False)
    with pytest.raises(ValueError, match="reward 'aux' must be a finite number"):
        emit_reward({"main": 1.0, "aux": value}, primary_key="main", propagate=False)


@pytest.mark.parametrize("stored", [float("nan"), "NaN", "Infinity", "-Infinity"])
def test_a_stored_non_finite_reward_counts_as_none_with_a_warning(
    stored: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A store keeps NaN as the string "NaN"; readers never hand an algorithm a NaN reward."""
    spans = [
        Span.from_attributes(
            name="agentlightning.annotation",
            attributes={"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": stored},
        ),
        Span.from_attributes(name="agentlightning.reward", attributes={"reward": stored}),
        Span.from_attributes(
            name="agentops.task",
            attributes={"agentops.task.output.type": "reward", "agentops.task.output.value": stored},
        ),
    ]
    with caplog.at_level("WARNING", logger="agentlightning.attributes.rewards"):
        for span in spans:
            assert get_reward_value(span) is None
            assert not is_reward_span(span)
    assert caplog.text.count("non-finite reward") == 2 * len(spans)
