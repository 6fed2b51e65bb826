"""`TraceTree`: a rollout's spans arranged by parent id, with repair for spans that lost their parent."""

from __future__ import annotations

import bisect
import logging
import re
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Optional, Union

from agentlightning.semconv import AGL_VIRTUAL
from agentlightning.types import Span, Triplet

from .calls import (
    LlmCall,
    LlmCallMatcher,
    RewardMatchPolicy,
    drop_calls_without_token_ids,
    find_llm_calls,
    match_rewards,
)
from .llm_call import DEFAULT_LLM_CALL_MATCH
from .report import AdaptationReport
from .tree_readers import (
    prompt_image_urls,
    span_agent_name,
    span_is_reward,
    span_reward_dict,
    span_to_triplet,
    tree_to_json,
    v03_llm_calls,
)

__all__ = ["TraceTree", "VIRTUAL_ROOT_ID"]

logger = logging.getLogger(__name__)

VIRTUAL_ROOT_ID = "virtual-root"


def span_start(span: Span) -> float:
    """Start time, falling back to the end time, then 0 (spans may lack timestamps)."""
    if span.start_time is not None:
        return span.start_time
    return span.end_time if span.end_time is not None else 0.0


def span_end(span: Span) -> float:
    """End time, falling back to the start time, then 0."""
    if span.end_time is not None:
        return span.end_time
    return span.start_time if span.start_time is not None else 0.0


def _order_key(node: TraceTree) -> tuple[float, int, str]:
    return (node.start_time, node.span.sequence_id, node.id)


class TraceTree:
    """A span and its children (sorted by start time, then sequence id)."""

    def __init__(self, id: str, span: Span, children: Optional[list[TraceTree]] = None, *, synthetic: bool = False):
        self.id = id
        self.span = span
        self.children: list[TraceTree] = children or []
        self.parent: Optional[TraceTree] = None
        self.synthetic = synthetic
        """True for nodes invented for missing parents and for the virtual root."""
        for child in self.children:
            child.parent = self

    @property
    def start_time(self) -> float:
        return span_start(self.span)

    @property
    def end_time(self) -> float:
        return span_end(self.span)

    def __repr__(self) -> str:
        return f"TraceTree(id={self.id!r}, name={self.span.name!r}, children={len(self.children)})"

    # ---- construction ----

    @classmethod
    def from_spans(cls, spans: Sequence[Span]) -> TraceTree:
        """Build the tree; missing parents become synthetic nodes, several roots hang under `virtual-root`.

        Raises ValueError on an empty sequence (there is no tree to build).
        """
        if not spans:
            raise ValueError("cannot build a TraceTree from zero spans; pass at least one span")
        nodes: dict[str, TraceTree] = {}
        for span in spans:
            if span.span_id in nodes:
                logger.debug("span id %s appears twice; keeping the first occurrence", span.span_id)
                continue
            nodes[span.span_id] = cls(span.span_id, span)

        missing: dict[str, list[TraceTree]] = {}
        roots: list[TraceTree] = []
        for node in list(nodes.values()):
            parent_id = node.span.parent_id
            if not parent_id or parent_id == node.id or not parent_id.strip("0"):  # all-zero id: no parent
                roots.append(node)
            elif parent_id in nodes:
                nodes[parent_id].add_child(node)
            else:
                missing.setdefault(parent_id, []).append(node)

        for parent_id, orphans in missing.items():
            synthetic = cls(parent_id, _synthetic_span(parent_id, [o.span for o in orphans]), synthetic=True)
            for orphan in orphans:
                synthetic.add_child(orphan)
            nodes[parent_id] = synthetic
            roots.append(synthetic)

        roots.extend(_break_cycles(nodes, roots))
        if len(roots) == 1:
            root = roots[0]
        else:
            root = cls(VIRTUAL_ROOT_ID, _synthetic_span(VIRTUAL_ROOT_ID, [r.span for r in roots]), synthetic=True)
            for node in roots:
                root.add_child(node)
        root.sort_children()
        return root

    def add_child(self, child: TraceTree) -> None:
        """Attach `child` (detaching it from its current parent first)."""
        if child.parent is not None:
            child.parent.children.remove(child)
        child.parent = self
        self.children.append(child)

    def sort_children(self) -> None:
        """Sort every node's children by start time, then sequence id (recursive)."""
        for node in self.traverse():
            node.children.sort(key=_order_key)

    # ---- traversal ----

    def traverse(self) -> list[TraceTree]:
        """Every node, pre-order depth-first (a list, as v0.3); iterative so deep traces cannot overflow the stack."""
        return list(self.iter_nodes())

    def iter_nodes(self) -> Iterator[TraceTree]:
        """`traverse()` lazily."""
        stack: list[TraceTree] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def find_id(self, id: str) -> Optional[TraceTree]:
        """The node whose id (span id) is `id`, or None."""
        return next((node for node in self.iter_nodes() if node.id == id), None)

    def ancestors(self) -> Iterator[TraceTree]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def names_tuple(self) -> tuple[str, list[Any]]:
        """`(name, [children...])` recursively, an agent span's name followed by ` [<agent name>]` (as v0.3)."""
        agent_name = self.agent_name()
        name = self.span.name if agent_name is None else f"{self.span.name} [{agent_name}]"
        return (name, [child.names_tuple() for child in self.children])

    # ---- v0.3's readers of one node ----

    def to_json(self) -> dict[str, Any]:
        """`{"id", "span": span.model_dump(), "children": [...]}` recursively (JSON-serialisable)."""
        return tree_to_json(self)

    def agent_name(self) -> Optional[str]:
        """The agent this span represents (OpenAI Agents SDK, AgentOps, AutoGen, LangGraph, Weave...), or None."""
        return None if self.synthetic else span_agent_name(self.span)

    def maybe_reward_dict(self) -> dict[str, Any]:
        """`{"type": "reward", "value": <float>}` when the span carries a reward, else `{}`."""
        return span_reward_dict(self.span)

    def is_reward_span(self) -> bool:
        """Whether the span records a reward (a reward value, or a `@reward` operation span)."""
        return span_is_reward(self.span)

    def extract_prompt_image_urls(self, prompt_raw_content: Any) -> list[str]:
        """Image URLs of the `image_url` parts of prompt messages, in order of appearance."""
        return prompt_image_urls(prompt_raw_content)

    def span_to_triplet(self, span: Span, agent_name: str) -> Triplet:
        """One LLM-call span as a triplet (token ids, raw messages, image URLs, logprobs; reward None).

        Subclasses may override it to add fields, as in v0.3.
        """
        return span_to_triplet(span, agent_name)

    def match_rewards(self, reward_match: str, llm_calls: list[TraceTree]) -> dict[str, Optional[float]]:
        """Rewards of this tree given to `llm_calls` per `reward_match` (a `RewardMatchPolicy` value).

        Returns `{call node id: reward}` for the calls that received one (the rule `to_trajectory` uses).
        """
        calls = [
            LlmCall(anchor=node, members=[node.span], response_id=None, agent_name=node.agent_name() or "")
            for node in llm_calls
        ]
        match_rewards(self, calls, RewardMatchPolicy(reward_match), AdaptationReport(adapter="TraceTree"))
        return {call.anchor.id: call.reward for call in calls if call.reward is not None}

    # ---- repair ----

    def repair_hierarchy(self) -> None:
        """Re-parent spans that float at the top level under the tightest span whose time window contains them.

        Mixed tracers (e.g. a LangChain callback tracer and the OpenAI instrumentation) can lose the parent
        link, leaving LLM spans as roots. Starting from the root, descend while a node has a single child;
        each direct child of the node reached moves under the tightest other node (not on that path, not in
        its own subtree) that contains its time window with strictly positive slack.
        """
        path: list[TraceTree] = [self]
        node = self
        while len(node.children) == 1:
            node = node.children[0]
            path.append(node)
        path_ids = {id(n) for n in path}
        # Containers must start no later than the child: scan candidates in start order and stop early.
        by_start = sorted((n for n in self.traverse() if id(n) not in path_ids), key=_order_key)
        windows = [(n.start_time, n.end_time, n) for n in by_start]
        starts = [w[0] for w in windows]
        for child in list(node.children):
            own_subtree = {id(n) for n in child.traverse()}
            child_start, child_end = child.start_time, child.end_time
            child_length = child_end - child_start
            best: Optional[TraceTree] = None
            best_slack = 0.0
            for start, end, candidate in windows[: bisect.bisect_right(starts, child_start)]:
                if end < child_end or id(candidate) in own_subtree:
                    continue
                slack = (end - start) - child_length
                if slack > 0 and (best is None or slack < best_slack):
                    best, best_slack = candidate, slack
            if best is not None:
                best.add_child(child)
        self.sort_children()

    # ---- triplets ----

    def find_llm_calls(
        self,
        matcher: Optional[LlmCallMatcher] = None,
        report: Optional[AdaptationReport] = None,
        *,
        llm_call_match: Optional[str] = None,
        **v03_filters: Any,
    ) -> Any:
        """The LLM calls in this tree (see `calls.find_llm_calls`), in start-time order.

        v0.3's keyword form (`llm_call_match=..., agent_match=..., within_reward=...`) returns v0.3's
        `(node, agent name)` pairs instead (`tree_readers.v03_llm_calls`).
        """
        if llm_call_match is not None:
            if matcher is not None:
                raise TypeError("find_llm_calls takes a matcher or v0.3's llm_call_match=..., not both")
            v03_filters.setdefault("agent_match", None)
            return v03_llm_calls(self, llm_call_match, **v03_filters)
        if matcher is None:
            raise TypeError("find_llm_calls needs a matcher (an LlmCallMatcher), or v0.3's llm_call_match=...")
        return find_llm_calls(self, matcher, report if report is not None else AdaptationReport(adapter="TraceTree"))

    def to_trajectory(
        self,
        llm_call_match: str = DEFAULT_LLM_CALL_MATCH,
        agent_match: Optional[str] = None,
        exclude_llm_call_in_reward: bool = True,
        dedup_llm_call: bool = True,
        reward_match: Union[RewardMatchPolicy, str] = RewardMatchPolicy.FIRST_OCCURRENCE,
        final_reward: Optional[float] = None,
        _skip_empty_token_spans: bool = False,
        *,
        detect_llm_calls_by_attributes: bool = True,
        report: Optional[AdaptationReport] = None,
    ) -> list[Triplet]:
        """One triplet per LLM call, rewards matched per `reward_match`; `final_reward` overrides the last one.

        The parameters are v0.3's, in v0.3's order. Spans of one call (nested, or repeating its response
        id) are always merged: `dedup_llm_call=False` raises `ValueError`. Pass a `report` to learn which
        LLM-looking spans were merged or left out, and why.
        """
        if not dedup_llm_call:
            raise ValueError(
                "dedup_llm_call=False is not supported: one LLM call seen by several spans (a framework span "
                "around the client's span, the proxy's raw_gen_ai_request) would become several triplets and be "
                "trained on more than once; spans of one call are always merged into one triplet"
            )
        report = report if report is not None else AdaptationReport(adapter="TraceTree")
        matcher = LlmCallMatcher(
            llm_call_match=llm_call_match,
            agent_match=agent_match,
            exclude_llm_call_in_reward=exclude_llm_call_in_reward,
            detect_by_attributes=detect_llm_calls_by_attributes,
        )
        calls = find_llm_calls(self, matcher, report)
        if _skip_empty_token_spans:
            calls = drop_calls_without_token_ids(calls, report)
        match_rewards(self, calls, RewardMatchPolicy(reward_match), report)
        triplets = [call.to_triplet() for call in calls]
        if final_reward is not None and triplets:
            triplets[-1].reward = final_reward
        report.n_triplets += len(triplets)
        report.n_triplets_without_token_ids += sum(
            1 for t in triplets if not t.prompt["token_ids"] or not t.response["token_ids"]
        )
        return triplets

    # ---- visualisation ----

    def render_text(self, interested_span_match: Optional[str] = None) -> str:
        """An indented text tree; with `interested_span_match`, only matching spans (and their ancestors)."""
        keep = self._interesting_ids(interested_span_match)
        lines: list[str] = []

        def visit(node: TraceTree, depth: int) -> None:
            if keep is not None and id(node) not in keep:
                return
            duration = node.end_time - node.start_time
            flags = " [synthetic]" if node.synthetic else ""
            lines.append(
                f"{'  ' * depth}- {node.span.name} (span {node.id}, seq {node.span.sequence_id}, {duration:.3f}s){flags}"
            )
            for child in node.children:
                visit(child, depth + 1)

        visit(self, 0)
        return "\n".join(lines) + "\n"

    def _interesting_ids(self, pattern: Optional[str]) -> Optional[set[int]]:
        if pattern is None:
            return None
        regex = re.compile(pattern)
        keep: set[int] = {id(self)}
        for node in self.traverse():
            if regex.search(node.span.name):
                keep.add(id(node))
                keep.update(id(a) for a in node.ancestors())
        return keep

    def visualize(self, filename: Union[str, Path], interested_span_match: Optional[str] = None) -> Path:
        """Draw the tree: `<filename>.png` via graphviz when installed (package and `dot`), else `<filename>.txt`.

        Returns the path written.
        """
        base = Path(filename)
        if _graphviz_available():
            return self._render_graphviz(base, interested_span_match)
        target = base.with_name(base.name + ".txt")
        target.write_text(self.render_text(interested_span_match), encoding="utf-8")
        logger.info(
            "graphviz not available (pip install agentlightning[graphviz] and the `dot` binary); wrote %s", target
        )
        return target

    def _render_graphviz(self, base: Path, interested_span_match: Optional[str]) -> Path:
        import graphviz  # type: ignore[import-not-found]

        keep = self._interesting_ids(interested_span_match)
        dot = graphviz.Digraph(comment="trace")  # type: ignore[attr-defined]
        for node in self.traverse():
            if keep is not None and id(node) not in keep:
                continue
            dot.node(str(id(node)), f"{node.span.name}\n{node.id}\n{node.end_time - node.start_time:.3f}s")
            if node.parent is not None and (keep is None or id(node.parent) in keep):
                dot.edge(str(id(node.parent)), str(id(node)))
        rendered = dot.render(str(base), format="png", cleanup=True)
        return Path(rendered)


def _graphviz_available() -> bool:
    try:
        import graphviz  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return False
    return shutil.which("dot") is not None


def _synthetic_span(span_id: str, children: Sequence[Span]) -> Span:
    """A stand-in span covering its children's time window."""
    first = children[0]
    starts = [span_start(c) for c in children]
    ends = [span_end(c) for c in children]
    return Span.from_attributes(
        name=AGL_VIRTUAL,
        rollout_id=first.rollout_id,
        attempt_id=first.attempt_id,
        sequence_id=min(c.sequence_id for c in children),
        trace_id=first.trace_id,
        span_id=span_id,
        start_time=min(starts),
        end_time=max(ends),
    )


def _break_cycles(nodes: dict[str, TraceTree], roots: list[TraceTree]) -> list[TraceTree]:
    """Nodes unreachable from the roots sit on parent cycles; detach the earliest of each cycle as a new root."""
    reachable: set[int] = set()
    for root in roots:
        reachable.update(id(n) for n in root.traverse())
    new_roots: list[TraceTree] = []
    for node in sorted(nodes.values(), key=_order_key):
        if id(node) in reachable:
            continue
        logger.warning("span %s is part of a parent-id cycle; treating it as a root", node.id)
        if node.parent is not None:
            node.parent.children.remove(node)
            node.parent = None
        new_roots.append(node)
        reachable.update(id(n) for n in node.traverse())
    return new_roots
