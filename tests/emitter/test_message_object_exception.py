"""Messages, objects and exceptions as spans with their exact names and attribute keys."""

from __future__ import annotations

import pytest

from agentlightning.emitter import emit_exception, emit_message, emit_object, get_message_value, get_object_value
from agentlightning.types import Span

from .conftest import Traced


async def test_message_span(traced: Traced) -> None:
    async with traced.context():
        emit_message("thinking about it", attributes={"step": 2})
    (span,) = await traced.spans()
    assert span.name == "agentlightning.message"
    assert span.attributes == {"step": 2, "agentlightning.message.body": "thinking about it"}
    assert get_message_value(span) == "thinking about it"
    with pytest.raises(TypeError):
        emit_message(42, propagate=False)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "type_name", "key"),
    [
        ("text", "str", "agentlightning.object.literal"),
        (3, "int", "agentlightning.object.literal"),
        (2.5, "float", "agentlightning.object.literal"),
        (False, "bool", "agentlightning.object.literal"),
        (b"\x00\xffraw", "bytes", "agentlightning.object.literal"),
        ({"a": [1, 2], "b": None}, "dict", "agentlightning.object.json"),
        ([1, "x"], "list", "agentlightning.object.json"),
    ],
)
async def test_object_round_trips(traced: Traced, value: object, type_name: str, key: str) -> None:
    async with traced.context():
        emit_object(value)
    (span,) = await traced.spans()
    assert span.name == "agentlightning.object"
    assert span.attributes["agentlightning.object.type"] == type_name
    assert key in span.attributes
    assert get_object_value(span) == value


def test_unserialisable_object_raises_runtime_error() -> None:
    with pytest.raises(RuntimeError, match="JSON"):
        emit_object(object(), propagate=False)


async def test_exception_span_has_otel_keys_and_ok_status(traced: Traced) -> None:
    try:
        raise ValueError("bad tool output")
    except ValueError as exc:
        async with traced.context():
            emit_exception(exc)
    (span,) = await traced.spans()
    assert span.name == "agentlightning.exception"
    assert span.status.status_code == "OK"
    assert span.attributes["exception.type"] == "ValueError"
    assert span.attributes["exception.message"] == "bad tool output"
    assert span.attributes["exception.escaped"] is True
    assert "bad tool output" in str(span.attributes["exception.stacktrace"])


def test_exception_emitter_rejects_non_exceptions() -> None:
    with pytest.raises(TypeError):
        emit_exception("oops", propagate=False)  # type: ignore[arg-type]


def test_values_of_other_spans_are_none() -> None:
    other = Span.from_attributes(name="x", attributes={})
    assert get_message_value(other) is None
    assert get_object_value(other) is None


def test_emitters_without_propagation_only_build_core_fields() -> None:
    core = emit_message("hi", propagate=False)
    assert core.name == "agentlightning.message" and core.start_time is not None
