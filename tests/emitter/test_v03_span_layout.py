"""The span layout v0.3 writes and reads: flattened attributes, object literals, operation names, exceptions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentlightning.attributes.otel import read_nested_attribute
from agentlightning.emitter import (
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    get_message_value,
    get_object_value,
    operation,
)
from agentlightning.emitter.annotation import OperationContext
from agentlightning.emitter.object import encode_object
from agentlightning.semconv import AGL_OPERATION
from agentlightning.types import Span, SpanCoreFields

from .conftest import Traced

NESTED = {"user": {"id": 7, "tags": ["a", "b"]}, "steps": [{"n": 1}, {"n": 2}], "flag": True}
FLAT = {"user.id": 7, "user.tags": ["a", "b"], "steps.0.n": 1, "steps.1.n": 2, "flag": True}


async def test_message_object_exception_flatten_nested_attributes_into_dotted_keys(traced: Traced) -> None:
    async with traced.context():
        emit_message("hello", attributes=NESTED)
        emit_object({"x": 1}, attributes=NESTED)
        emit_exception(ValueError("boom"), attributes=NESTED)
    spans = await traced.spans()
    assert [s.name for s in spans] == ["agentlightning.message", "agentlightning.object", "agentlightning.exception"]
    for span in spans:
        assert {key: span.attributes[key] for key in FLAT} == FLAT
        assert "user" not in span.attributes and "steps" not in span.attributes
        assert read_nested_attribute(span.attributes, "user") == {"id": 7, "tags": ["a", "b"]}
    assert spans[1].status.status_code == "OK"


def test_object_literals_are_text_with_the_type_name_as_v03() -> None:
    assert encode_object(5) == {"agentlightning.object.type": "int", "agentlightning.object.literal": "5"}
    assert encode_object(True) == {"agentlightning.object.type": "bool", "agentlightning.object.literal": "True"}
    assert encode_object(b"\x00\x01") == {
        "agentlightning.object.type": "bytes",
        "agentlightning.object.literal": "AAE=",
    }
    assert encode_object({"k": [1]}) == {
        "agentlightning.object.type": "dict",
        "agentlightning.object.json": '{"k": [1]}',
    }
    for value in ("text", 3, 2.5, False, b"raw", {"k": [1, None]}, [1, "x"]):
        core = emit_object(value, propagate=False)
        assert get_object_value(_span(core.name, dict(core.attributes))) == value


def _span(name: str, attributes: dict[str, Any]) -> Span:
    core = SpanCoreFields(name=name, attributes=attributes, start_time=1.0, end_time=1.0)
    return Span.from_core_fields(core, rollout_id="r", attempt_id="a", sequence_id=1)


def test_object_reader_reads_v03_spans_and_spans_stored_by_earlier_versions() -> None:
    # v0.3's layout, whatever the span is called.
    v03 = {"agentlightning.object.type": "float", "agentlightning.object.literal": "2.5"}
    assert get_object_value(_span("custom", v03)) == 2.5
    assert (
        get_object_value(_span("x", {"agentlightning.object.type": "bool", "agentlightning.object.literal": "false"}))
        is False
    )
    # Earlier versions of this package: typed literals and `builtins.` type names.
    assert (
        get_object_value(
            _span(
                "agentlightning.object",
                {"agentlightning.object.type": "builtins.int", "agentlightning.object.literal": 3},
            )
        )
        == 3
    )
    with pytest.raises(RuntimeError, match="type 'Color'"):
        get_object_value(_span("x", {"agentlightning.object.type": "Color", "agentlightning.object.literal": "red"}))
    assert get_object_value(_span("x", {"other": 1})) is None


def test_message_reader_checks_the_body_not_the_span_name() -> None:
    assert get_message_value(_span("custom", {"agentlightning.message.body": "hi"})) == "hi"
    assert get_message_value(_span("agentlightning.message", {})) is None
    with pytest.raises(TypeError, match="must be a string"):
        get_message_value(_span("agentlightning.message", {"agentlightning.message.body": 3}))


def test_exception_description_uses_the_class_name() -> None:
    class Outer:
        class Failure(Exception):
            pass

    attributes = emit_exception(Outer.Failure("bad"), propagate=False).attributes
    assert attributes["exception.type"] == "Failure"
    assert attributes["exception.message"] == "bad"


def test_user_attributes_override_the_emitted_fields_as_v03() -> None:
    core = emit_message("body", attributes={"agentlightning.message.body": "override"}, propagate=False)
    assert core.attributes["agentlightning.message.body"] == "override"


async def test_operation_name_keyword_sets_the_operation_name_attribute(traced: Traced) -> None:
    @operation(name="lookup", team="search")
    def find(query: str, limit: int = 3) -> list[str]:
        return [query] * limit

    async with traced.context():
        with operation(name="plan", meta={"depth": 2, "tools": ["a", "b"]}) as op:
            op.set_input("q", options={"k": 1})
            op.set_output({"steps": [{"t": "search"}]})
        assert find("x") == ["x", "x", "x"]
    plan, lookup = await traced.spans()
    assert plan.name == lookup.name == AGL_OPERATION
    assert plan.attributes["agentlightning.operation.name"] == "plan"
    assert "name" not in plan.attributes
    assert plan.attributes["meta.depth"] == 2 and plan.attributes["meta.tools"] == ["a", "b"]
    assert plan.attributes["agentlightning.operation.input.args.0"] == "q"
    assert plan.attributes["agentlightning.operation.input.options.k"] == 1
    assert plan.attributes["agentlightning.operation.output.steps.0.t"] == "search"
    # name= wins over the decorated function's name; defaults are recorded.
    assert lookup.attributes["agentlightning.operation.name"] == "lookup"
    assert lookup.attributes["team"] == "search"
    assert lookup.attributes["agentlightning.operation.input.limit"] == 3
    assert lookup.attributes["agentlightning.operation.output"] == ["x", "x", "x"]
    with pytest.raises(ValueError, match="both name="):
        clashing: dict[str, Any] = {"agentlightning.operation.name": "b"}
        operation(name="a", **clashing)


def test_operation_context_has_v03_shape() -> None:
    op = OperationContext("my.span", {"a": {"b": 1}}, propagate=False)
    assert op.name == "my.span" and op.initial_attributes == {"a.b": 1} and op.propagate is False
    with pytest.raises(RuntimeError, match="not finished"):
        op.span()
    with op:
        op.set_output(5)
    span = op.span()
    assert span.name == "my.span"
    assert span.attributes == {"a.b": 1, "agentlightning.operation.output": 5}


def test_annotation_span_status_is_ok_and_mixed_lists_are_expanded() -> None:
    core = emit_annotation({"flags": [True, 1], "scores": [0.5, 1.5]}, propagate=False)
    assert core.status.status_code == "OK"
    assert core.attributes == {"flags.0": True, "flags.1": 1, "scores": [0.5, 1.5]}


def test_read_nested_attribute_reads_both_shapes() -> None:
    stored_whole = {"meta": json.dumps({"depth": 2, "tools": ["a"]})}
    flattened = {"meta.depth": 2, "meta.tools": ["a"]}
    assert read_nested_attribute(stored_whole, "meta") == read_nested_attribute(flattened, "meta")
    assert read_nested_attribute({"meta": "plain"}, "meta") == "plain"
    assert read_nested_attribute({}, "meta") is None
