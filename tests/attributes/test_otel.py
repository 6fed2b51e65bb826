"""OpenTelemetry helpers: flattening, tags, links, sanitising, exception attributes, provider lookup."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import cast

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from agentlightning.attributes.otel import (
    check_attributes_sanity,
    describe_tracer_provider,
    extract_links_from_attributes,
    extract_tags_from_attributes,
    filter_and_unflatten_attributes,
    filter_attributes,
    flatten_attributes,
    format_exception_attributes,
    full_qualified_name,
    get_tracer,
    get_tracer_provider,
    make_link_attributes,
    make_tag_attributes,
    query_linked_spans,
    sanitize_attribute_value,
    sanitize_attributes,
    sanitize_list_attribute_sanity,
    unflatten_attributes,
)
from agentlightning.semconv import LinkPydanticModel
from agentlightning.types import Span


def test_flatten_and_unflatten_round_trip() -> None:
    nested = {"a": {"b": 1, "c": [{"d": "x"}, {"d": "y"}]}, "e": [1, 2]}
    flat = flatten_attributes(nested)
    assert flat == {"a.b": 1, "a.c.0.d": "x", "a.c.1.d": "y", "e": [1, 2]}
    assert unflatten_attributes(flat) == nested


def test_flatten_keeps_homogeneous_primitive_lists_and_expands_the_others() -> None:
    flat = flatten_attributes({"ids": [1, 2], "tags": ["a"], "msgs": [{"role": "user"}], "mixed": [1, "a", True]})
    assert flat == {"ids": [1, 2], "tags": ["a"], "msgs.0.role": "user", "mixed.0": 1, "mixed.1": "a", "mixed.2": True}
    assert flatten_attributes({"flags": [True, 1]}) == {"flags.0": True, "flags.1": 1}  # bool and int differ
    assert flatten_attributes({"ids": [1, 2]}, expand_leaf_lists=True) == {"ids.0": 1, "ids.1": 2}


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
        "none": "null",
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
    from agentlightning.tracer.otel import OtelTracer

    tracer = OtelTracer(instrument_openai=False)
    tracer.init_worker(0)
    try:
        with get_tracer().start_as_current_span("noop") as span:
            span.set_attribute("k", 1)
            assert span.get_span_context().is_valid
    finally:
        tracer.teardown_worker(0)


def test_get_tracer_raises_before_a_provider_is_set_up() -> None:
    # A fresh interpreter: the global provider can be set only once per process.
    code = (
        "from agentlightning.attributes.otel import get_tracer, get_tracer_provider\n"
        "for call in (get_tracer, lambda: get_tracer_provider(inspect=False)):\n"
        "    try:\n"
        "        call()\n"
        "    except RuntimeError as exc:\n"
        "        assert 'SDK TracerProvider' in str(exc), exc\n"
        "    else:\n"
        "        raise SystemExit('no error')\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "provider = TracerProvider()\n"
        "trace.set_tracer_provider(provider)\n"
        "assert get_tracer_provider() is provider\n"
        "assert get_tracer().start_span('s').get_span_context().is_valid\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_get_tracer_provider_inspect_logs_processors_and_exporters(caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    assert describe_tracer_provider(provider) == [
        "opentelemetry.sdk.trace.export.SimpleSpanProcessor -> "
        "opentelemetry.sdk.trace.export.in_memory_span_exporter.InMemorySpanExporter"
    ]
    from agentlightning.tracer.otel import OtelTracer

    tracer = OtelTracer(instrument_openai=False)
    tracer.init_worker(0)
    try:
        with caplog.at_level(logging.DEBUG, logger="agentlightning.attributes.otel"):
            get_tracer_provider(inspect=True)
            assert "span processors" in caplog.text
            caplog.clear()
            get_tracer_provider(inspect=False)
            assert caplog.text == ""
    finally:
        tracer.teardown_worker(0)


# ---- the documented helpers (v0.3) ----


class _Local:
    def method(self) -> None: ...


def test_full_qualified_name() -> None:
    assert full_qualified_name(_Local) == f"{__name__}._Local"
    assert full_qualified_name(_Local()) == f"{__name__}._Local"
    assert full_qualified_name(_Local.method) == f"{__name__}._Local.method"
    assert full_qualified_name(3) == "int" and full_qualified_name(dict) == "dict"
    assert full_qualified_name(TracerProvider) == "opentelemetry.sdk.trace.TracerProvider"


def test_sanitize_attribute_value_and_list_sanity() -> None:
    assert sanitize_attribute_value("x") == "x" and sanitize_attribute_value(2.5) == 2.5
    # As v0.3: tuples, dicts, None and lists that are not one primitive type are JSON text.
    assert sanitize_attribute_value((1, 2)) == "[1, 2]"
    assert sanitize_attribute_value({"k": 1}) == '{"k": 1}'
    assert sanitize_attribute_value(None) == "null"
    assert sanitize_attribute_value([1, "a"]) == '[1, "a"]'
    assert sanitize_attribute_value({"k": 1}, force=False) == '{"k": 1}'
    assert str(sanitize_attribute_value({"when": object()})).startswith('{"when": "<object')
    with pytest.raises(ValueError, match="field: a dict is not JSON serialisable"):
        sanitize_attribute_value({"k": object()}, force=False, key="field")
    assert sanitize_list_attribute_sanity([]) == [] and sanitize_list_attribute_sanity(("a", "b")) == ["a", "b"]
    with pytest.raises(ValueError, match="ids: .*dict"):
        sanitize_list_attribute_sanity([1, {"x": 1}], key="ids")
    with pytest.raises(ValueError, match="one primitive type, got int, str"):
        sanitize_list_attribute_sanity([1, "a"])


def test_sanitize_attributes_force_false_rejects_what_json_cannot_encode() -> None:
    assert sanitize_attributes({"a": 1, "b": None, "l": ["x"], "d": {"k": 1}}, force=False) == {
        "a": 1,
        "b": "null",
        "l": ["x"],
        "d": '{"k": 1}',
    }
    with pytest.raises(ValueError, match="o: a object is not JSON serialisable"):
        sanitize_attributes({"a": 1, "o": object()}, force=False)


def test_check_attributes_sanity() -> None:
    # As v0.3: only the keys' type and the values are checked.
    check_attributes_sanity({"a.b": 1, "a.c": [1, 2], "s": "x", "a": 1, "": 2, "bools": [True, 1]})
    with pytest.raises(ValueError, match="x: .*NoneType"):
        check_attributes_sanity({"x": None})
    with pytest.raises(ValueError, match="d: .*dict"):
        check_attributes_sanity({"d": {"k": 1}})
    with pytest.raises(ValueError, match="l: .*one primitive type"):
        check_attributes_sanity({"l": [1, "a"]})
    with pytest.raises(ValueError, match="must be str"):
        check_attributes_sanity({1: 1})


def test_extract_tags_and_filter_attributes() -> None:
    attributes = {**make_tag_attributes(["fast", "eval", "x"]), "agentlightning.tag.other": "no", "k": 1}
    assert extract_tags_from_attributes(attributes) == ["fast", "eval", "x"]
    assert extract_tags_from_attributes({"agentlightning.tag.10": "b", "agentlightning.tag.2": "a"}) == ["a", "b"]
    assert filter_attributes(
        {"gen_ai.prompt.0.role": "u", "gen_ai.prompt": "p", "gen_ai.promptx": 1}, "gen_ai.prompt"
    ) == {
        "gen_ai.prompt.0.role": "u",
        "gen_ai.prompt": "p",
    }


def test_get_tracer_provider_is_the_provider_the_otel_tracer_uses() -> None:
    from agentlightning.attributes.otel import get_tracer_provider
    from agentlightning.tracer.otel import OtelTracer

    tracer = OtelTracer(instrument_openai=False)
    tracer.init_worker(0)
    try:
        assert get_tracer_provider() is tracer.tracer_provider
    finally:
        tracer.teardown_worker(0)


def test_v03_flatten_layout() -> None:
    # Empty containers produce no key; a top-level list is expanded; tuples are leaves.
    assert flatten_attributes({"a": {}, "b": [], "c": 1}) == {"c": 1}
    assert flatten_attributes(["x", "y"]) == {"0": "x", "1": "y"}
    assert flatten_attributes({"t": (1, 2)}) == {"t": (1, 2)}
    with pytest.raises(ValueError, match="only string keys"):
        flatten_attributes({"a": {1: "x"}})


def test_v03_list_coercion_of_bools_ints_and_floats() -> None:
    assert sanitize_list_attribute_sanity([True, False]) == [True, False]
    assert sanitize_list_attribute_sanity([True, 2]) == [1, 2]
    assert sanitize_list_attribute_sanity([1, 2.5, True]) == [1.0, 2.5, 1.0]
    assert sanitize_attributes({"ids": [1, True]}) == {"ids": [1, 1]}
    check_attributes_sanity({"ids": [1, True], "xs": [1, 2.5]})


def test_v03_prefix_value_and_link_values() -> None:
    with pytest.raises(ValueError, match="holds a value itself"):
        filter_and_unflatten_attributes({"p": 1, "p.a": 2}, "p")
    with pytest.raises(ValueError, match="must be a string"):
        make_link_attributes({"span_id": 5})  # type: ignore[dict-item]


def test_get_tracer_without_the_active_span_processor() -> None:
    from opentelemetry.sdk.trace import SpanProcessor

    from agentlightning.attributes.otel import get_span_processors
    from agentlightning.tracer.otel import OtelTracer, _detach_processor  # pyright: ignore[reportPrivateUsage]

    class Collect(SpanProcessor):
        def __init__(self) -> None:
            self.ended: list[str] = []

        def on_end(self, span: ReadableSpan) -> None:
            self.ended.append(span.name)

    tracer = OtelTracer(instrument_openai=False)
    tracer.init_worker(0)
    provider = get_tracer_provider(inspect=False)
    collect = Collect()
    provider.add_span_processor(collect)
    try:
        assert get_span_processors(provider, Collect) == [collect]
        get_tracer(use_active_span_processor=False).start_span("detached").end()
        get_tracer().start_span("attached").end()
        assert collect.ended == ["attached"]
    finally:
        _detach_processor(provider, collect)
        tracer.teardown_worker(0)
