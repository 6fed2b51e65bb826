"""TraceTree: building from spans, synthetic parents, virtual root, hierarchy repair, visualisation."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from agentlightning.adapter import tree as tree_module
from agentlightning.adapter.triplet import TraceTree
from agentlightning.semconv import AGL_VIRTUAL

from .span_factory import SpanFactory


def test_children_sorted_by_start_time_then_sequence():
    f = SpanFactory()
    root = f.span("root", start=0, end=10)
    late = f.span("late", parent=root, start=5, end=6)
    early = f.span("early", parent=root, start=1, end=2)
    tie_b = f.span("tie-b", parent=root, start=3, end=4, sequence_id=20)
    tie_a = f.span("tie-a", parent=root, start=3, end=4, sequence_id=10)
    tree = TraceTree.from_spans([late, tie_b, root, early, tie_a])
    assert tree.id == root.span_id
    assert [c.span.name for c in tree.children] == ["early", "tie-a", "tie-b", "late"]
    assert all(child.parent is tree for child in tree.children)


def test_missing_parent_becomes_synthetic_node_spanning_children():
    f = SpanFactory()
    a = f.span("a", parent="ffffffffffffffff", start=2, end=3)
    b = f.span("b", parent="ffffffffffffffff", start=5, end=9)
    tree = TraceTree.from_spans([a, b])
    assert tree.id == "ffffffffffffffff"
    assert tree.synthetic
    assert tree.span.name == AGL_VIRTUAL
    assert (tree.start_time, tree.end_time) == (2, 9)
    assert [c.span.name for c in tree.children] == ["a", "b"]


def test_several_roots_hang_under_virtual_root():
    f = SpanFactory()
    r1 = f.span("r1", start=0, end=1)
    r2 = f.span("r2", start=4, end=8)
    orphan = f.span("orphan", parent="0123456789abcdef", start=2, end=3)
    tree = TraceTree.from_spans([r2, orphan, r1])
    assert tree.id == "virtual-root"
    assert tree.synthetic
    assert (tree.start_time, tree.end_time) == (0, 8)
    assert tree.names_tuple() == (AGL_VIRTUAL, [("r1", []), (AGL_VIRTUAL, [("orphan", [])]), ("r2", [])])


def test_empty_spans_is_an_error():
    with pytest.raises(ValueError, match="zero spans"):
        TraceTree.from_spans([])


def test_parent_cycle_is_broken_instead_of_looping():
    f = SpanFactory()
    a = f.span("a", span_id="000000000000000a", parent="000000000000000b", start=0, end=5)
    b = f.span("b", span_id="000000000000000b", parent="000000000000000a", start=1, end=2)
    tree = TraceTree.from_spans([a, b])
    assert tree.names_tuple() == ("a", [("b", [])])


def test_duplicate_span_ids_keep_first():
    f = SpanFactory()
    a = f.span("first", span_id="00000000000000aa")
    a2 = f.span("second", span_id="00000000000000aa")
    tree = TraceTree.from_spans([a, a2])
    assert tree.names_tuple() == ("first", [])


def test_repair_hierarchy_moves_floating_span_under_tightest_container():
    f = SpanFactory()
    agent = f.span("agent", start=0, end=10)
    chain = f.span("chain", parent=agent, start=1, end=6)
    floating_llm = f.span("openai.chat.completion", start=2, end=3)  # lost its parent (another tracer)
    reward = f.span("reward", start=11, end=11)
    tree = TraceTree.from_spans([agent, chain, floating_llm, reward])
    assert tree.id == "virtual-root"
    tree.repair_hierarchy()
    assert tree.names_tuple() == (
        AGL_VIRTUAL,
        [("agent", [("chain", [("openai.chat.completion", [])])]), ("reward", [])],
    )


def test_repair_hierarchy_descends_single_child_chain_and_needs_positive_slack():
    f = SpanFactory()
    root = f.span("root", start=0, end=10)
    session = f.span("session", parent=root, start=0, end=10)
    a = f.span("a", parent=session, start=1, end=5)
    same_window = f.span("same-window", parent=session, start=1, end=5)
    inner = f.span("inner", parent=session, start=2, end=3)
    tree = TraceTree.from_spans([root, session, a, same_window, inner])
    tree.repair_hierarchy()
    # `a` and `same-window` have identical windows: zero slack, neither moves under the other.
    names = tree.names_tuple()
    assert names[0] == "root"
    session_children = names[1][0][1]
    assert [child[0] for child in session_children] == ["a", "same-window"]
    moved_under = [child for child in session_children if child[1]]
    assert len(moved_under) == 1 and moved_under[0][1] == [("inner", [])]


def test_repair_hierarchy_never_moves_a_span_into_its_own_subtree():
    f = SpanFactory()
    outer = f.span("outer", start=0, end=10)
    big = f.span("big", start=1, end=9)
    big_child = f.span("big-child", parent=big, start=0.5, end=9.5)  # child outlives its parent
    tree = TraceTree.from_spans([outer, big, big_child])
    tree.repair_hierarchy()
    assert tree.names_tuple() == (AGL_VIRTUAL, [("outer", [("big", [("big-child", [])])])])


def test_render_text_and_interested_span_match():
    f = SpanFactory()
    agent = f.span("agent", start=0, end=10)
    llm = f.span("openai.chat.completion", parent=agent, start=3, end=4)
    tool = f.span("tool", parent=agent, start=1, end=2)
    tree = TraceTree.from_spans([agent, tool, llm])
    text = tree.render_text()
    assert text.splitlines()[0].startswith("- agent (span ")
    assert "  - tool (span" in text and "  - openai.chat.completion (span" in text
    filtered = tree.render_text(interested_span_match=r"openai")
    assert "tool" not in filtered
    assert filtered.count("\n") == 2


def test_visualize_without_graphviz_writes_text_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(tree_module, "_graphviz_available", lambda: False)
    f = SpanFactory()
    agent = f.span("agent", start=0, end=10)
    llm = f.span("openai.chat.completion", parent=agent, start=3, end=4)
    tree = TraceTree.from_spans([agent, llm])
    written = tree.visualize(tmp_path / "trace", interested_span_match="openai")
    assert written == tmp_path / "trace.txt"
    assert written.read_text() == tree.render_text("openai")


def test_visualize_with_graphviz_renders_png(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    rendered: dict[str, object] = {}

    class FakeDigraph:
        """Records what TraceTree asks graphviz to draw (the real package needs the `dot` binary)."""

        def __init__(self, comment: str = "") -> None:
            self.nodes: list[str] = []
            self.edges: list[tuple[str, str]] = []

        def node(self, name: str, label: str) -> None:
            self.nodes.append(label)

        def edge(self, tail: str, head: str) -> None:
            self.edges.append((tail, head))

        def render(self, filename: str, format: str, cleanup: bool) -> str:
            rendered.update(filename=filename, format=format, nodes=self.nodes, edges=self.edges)
            return f"{filename}.{format}"

    monkeypatch.setitem(sys.modules, "graphviz", types.SimpleNamespace(Digraph=FakeDigraph))
    monkeypatch.setattr(tree_module, "_graphviz_available", lambda: True)
    f = SpanFactory()
    agent = f.span("agent", start=0, end=10)
    tool = f.span("tool", parent=agent, start=1, end=2)
    llm = f.span("openai.chat.completion", parent=agent, start=3, end=4)
    tree = TraceTree.from_spans([agent, tool, llm])
    written = tree.visualize(tmp_path / "trace", interested_span_match="openai")
    assert written == tmp_path / "trace.png"
    assert rendered["format"] == "png"
    labels = rendered["nodes"]
    assert isinstance(labels, list) and [label.split("\n")[0] for label in labels] == [
        "agent",
        "openai.chat.completion",
    ]
    assert len(rendered["edges"]) == 1  # type: ignore[arg-type]
