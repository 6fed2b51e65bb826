"""OpenTelemetry helpers: flattening, tags, links, sanitising, exception attributes, provider lookup."""

from __future__ import annotations

from typing import cast

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from agentlightning.semconv import LinkPydanticModel
from agentlightning.types import Span
from agentlightning.utils.otel import (
    extract_links_from_attributes,
    filter_and_unflatten_attributes,
    flatten_attributes,
    format_exception_attributes,
    get_tracer,
    make_link_attributes,
    make_tag_attributes,
    query_linked_spans,
    sanitize_attributes,
    unflatten_attributes,
)


def test_flatten_and_unflatten_round_trip() -> None:
    nested = {"a": {"b": 1, "c": [{"d": "x"}, {"d": "y"}]}, "e": [1, 2]}
    flat = flatten_attributes(nested)
    assert flat == {"a.b": 1, "a.c.0.d": "x", "a.c.1.d": "y", "e.0": 1, "e.1": 2}
    assert unflatten_attributes(flat) == nested


def test_flatten_can_keep_primitive_lists_as_leaves() -> None:
    flat = flatten_attributes({"ids": [1, 2], "msgs": [{"role": "user"}]}, expand_leaf_lists=False)
    assert flat == {"ids": [1, 2], "msgs.0.role": "user"}


def test_flatten_rejects_bare_values() -> None:
    with pytest.raises(ValueError):
        flatten_attributes(3)  # type: ignore[arg-type]


def test_unflatten_rejects_a_key_that_is_both_value_and_prefix() -> None:
    with pytest.raises(ValueError, match="a"):
        unflatten_attributes({"a": 1, "a.b": 2})


def test_filter_and_unflatten_strips_the_prefix() -> None:
    attributes = {"gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "hi", "gen_ai.system": "openai"}
    assert filter_and_unflatten_attributes(attributes, "gen_ai.prompt") == [{"role": "user", "content": "hi"}]


def test_sanitize_keeps_valid_values_and_json_encodes_the_rest() -> None:
    assert sanitize_attributes({"s": "x", "i": 1, "l": [1, 2], "none": None, "d": {"k": 1}, "mixed": [1, "a"]}) == {
        "s": "x",
        "i": 1,
        "l": [1, 2],
        "d": '{"k": 1}',
        "mixed": '[1, "a"]',
    }


def test_format_exception_attributes() -> None:
    try:
        raise ValueError("nope")
    except ValueError as exc:
        attributes = format_exception_attributes(exc)
    assert attributes["exception.type"] == "ValueError"
    assert attributes["exception.message"] == "nope"
    assert attributes["exception.escaped"] is True
    assert "Traceback" in str(attributes["exception.stacktrace"])


def test_tags_and_links() -> None:
    assert make_tag_attributes(["fast", "eval"]) == {"agentlightning.tag.0": "fast", "agentlightning.tag.1": "eval"}
    links = make_link_attributes({"gen_ai.response.id": "resp-1", "span_id": "abc"})
    assert links == {
        "agentlightning.link.0.key_match": "gen_ai.response.id",
        "agentlightning.link.0.value_match": "resp-1",
        "agentlightning.link.1.key_match": "span_id",
        "agentlightning.link.1.value_match": "abc",
    }
    assert extract_links_from_attributes({**links, "other": 1}) == [
        LinkPydanticModel(key_match="gen_ai.response.id", value_match="resp-1"),
        LinkPydanticModel(key_match="span_id", value_match="abc"),
    ]


def test_query_linked_spans_matches_attributes_and_span_fields() -> None:
    target = Span.from_attributes(attributes={"gen_ai.response.id": "resp-1"}, span_id="abc0000000000000")
    other = Span.from_attributes(attributes={"gen_ai.response.id": "resp-2"})
    by_attribute = [LinkPydanticModel(key_match="gen_ai.response.id", value_match="resp-1")]
    by_field = [LinkPydanticModel(key_match="span_id", value_match="abc0000000000000")]
    assert query_linked_spans([target, other], by_attribute) == [target]
    assert query_linked_spans([target, other], by_field) == [target]


def test_query_linked_spans_on_readable_spans() -> None:
    provider = TracerProvider()
    span = cast(ReadableSpan, provider.get_tracer("t").start_span("s", attributes={"k": "v"}))
    span.end()  # type: ignore[attr-defined]
    assert span.context is not None
    span_id = format(span.context.span_id, "016x")
    assert query_linked_spans([span], [LinkPydanticModel(key_match="span_id", value_match=span_id)]) == [span]
    assert query_linked_spans([span], [LinkPydanticModel(key_match="k", value_match="v")]) == [span]


def test_get_tracer_returns_a_usable_tracer() -> None:
    with get_tracer("agentlightning.tests").start_as_current_span("noop") as span:
        span.set_attribute("k", 1)


def test_get_tracer_provider_is_the_provider_the_otel_tracer_uses() -> None:
    from agentlightning.tracer.otel import OtelTracer
    from agentlightning.utils.otel import get_tracer_provider

    tracer = OtelTracer(instrument_openai=False)
    tracer.init_worker(0)
    try:
        assert get_tracer_provider() is tracer.tracer_provider
    finally:
        tracer.teardown_worker(0)
