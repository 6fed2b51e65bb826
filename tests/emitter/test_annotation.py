"""Annotations (flattened dicts) and operations (decorator / context manager spans)."""

from __future__ import annotations

import pytest

from agentlightning.emitter import emit_annotation, operation
from agentlightning.types import Span

from .conftest import Traced


async def test_annotation_is_flattened_with_lists_kept_as_leaves(traced: Traced) -> None:
    async with traced.context():
        emit_annotation({"judge": {"model": "gpt", "scores": [1, 2, 3]}, "note": "ok", "extra": {"obj": {1, 2}}})
    (span,) = await traced.spans()
    assert span.name == "agentlightning.annotation"
    assert span.attributes["judge.model"] == "gpt"
    assert span.attributes["judge.scores"] == [1, 2, 3]
    assert span.attributes["note"] == "ok"
    assert span.attributes["extra.obj"] == [1, 2]


def test_annotation_values_are_validated_before_the_tracer_is_looked_up() -> None:
    # No active tracer: a valid annotation fails for that reason, a bad one for its value first.
    with pytest.raises(RuntimeError, match="no active tracer"):
        emit_annotation({"ok": 1})
    with pytest.raises(ValueError, match="judge.model: .*NoneType"):
        emit_annotation({"judge": {"model": None}})
    with pytest.raises(ValueError, match="blob: .*object"):
        emit_annotation({"blob": object()})
    with pytest.raises(ValueError, match="only string keys"):
        emit_annotation({1: 1})  # type: ignore[dict-item]
    # As v0.3: empty containers record nothing, mixed lists and lists of objects are expanded by index.
    core = emit_annotation({"mixed": [1, "a"], "empty": {}, "nested": [{"k": 1}]}, propagate=False)
    assert core.attributes == {"mixed.0": 1, "mixed.1": "a", "nested.0.k": 1}


def test_annotation_rejects_non_dicts() -> None:
    with pytest.raises(TypeError):
        emit_annotation(["not", "a", "dict"], propagate=False)  # type: ignore[arg-type]


def _by_name(spans: list[Span]) -> dict[str, Span]:
    return {str(s.attributes.get("agentlightning.operation.name", s.name)): s for s in spans}


async def test_operation_decorator_records_name_inputs_and_output(traced: Traced) -> None:
    @operation
    def add(a: int, b: int, *rest: int, scale: float = 1.0, **options: str) -> dict[str, object]:
        return {"sum": (a + b + sum(rest)) * scale, "options": options}

    @operation(category="retrieval")
    async def fetch(query: str) -> list[str]:
        return [query, query.upper()]

    async with traced.context():
        assert add(1, 2, 3, scale=2.0, mode="fast") == {"sum": 12.0, "options": {"mode": "fast"}}
        assert await fetch("q") == ["q", "Q"]
    spans = _by_name(await traced.spans())
    add_span, fetch_span = spans["add"], spans["fetch"]
    assert add_span.name == "agentlightning.operation"
    assert add_span.attributes["agentlightning.operation.input.a"] == 1
    assert add_span.attributes["agentlightning.operation.input.b"] == 2
    # v0.3's names: `*rest` under its own name, `**options` as a dict under its name.
    assert add_span.attributes["agentlightning.operation.input.rest.0"] == 3
    assert add_span.attributes["agentlightning.operation.input.scale"] == 2.0
    assert add_span.attributes["agentlightning.operation.input.options.mode"] == "fast"
    assert add_span.attributes["agentlightning.operation.output.sum"] == 12.0
    assert add_span.attributes["agentlightning.operation.output.options.mode"] == "fast"
    assert fetch_span.attributes["category"] == "retrieval"
    assert fetch_span.attributes["agentlightning.operation.input.query"] == "q"
    assert fetch_span.attributes["agentlightning.operation.output"] == ["q", "Q"]


async def test_operation_context_manager_sync_and_async(traced: Traced) -> None:
    async with traced.context():
        with operation(user_id=1) as op:
            op.set_input("question", context={"doc": "d1"})
            op.set_output("answer")
        async with operation(stage="async") as aop:
            aop.set_output(3)
    first, second = await traced.spans()
    assert first.name == second.name == "agentlightning.operation"
    assert first.attributes["user_id"] == 1
    assert first.attributes["agentlightning.operation.input.args.0"] == "question"
    assert first.attributes["agentlightning.operation.input.context.doc"] == "d1"
    assert first.attributes["agentlightning.operation.output"] == "answer"
    assert second.attributes["stage"] == "async"
    assert second.attributes["agentlightning.operation.output"] == 3


async def test_operation_records_exceptions_and_reraises(traced: Traced) -> None:
    @operation
    def explode() -> None:
        raise RuntimeError("boom")

    async with traced.context():
        with pytest.raises(RuntimeError, match="boom"):
            explode()
        with pytest.raises(KeyError):
            with operation(step="ctx"):
                raise KeyError("k")
    spans = await traced.spans()
    assert [s.status.status_code for s in spans] == ["ERROR", "ERROR"]
    assert [s.attributes["exception.type"] for s in spans] == ["RuntimeError", "KeyError"]


def test_operation_needs_an_active_tracer_unless_not_propagating() -> None:
    @operation
    def f() -> int:
        return 1

    with pytest.raises(RuntimeError, match="no active tracer"):
        f()
    with operation(propagate=False, k="v") as op:
        op.set_output({"x": 1})
    recorded = op.get_recorded_span()
    assert recorded is not None
    assert recorded.attributes == {"k": "v", "agentlightning.operation.output.x": 1}
