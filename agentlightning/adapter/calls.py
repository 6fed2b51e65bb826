"""Finding the LLM calls in a span tree and attaching reward spans to them.

Every LLM-looking span either anchors an `LlmCall`, is merged into one (the same call seen twice), or is
recorded in the `AdaptationReport` with the reason it was left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property
from typing import Any, Optional, Protocol

from agentlightning.attributes.rewards import get_reward_value, get_rewards_from_span, is_reward_span
from agentlightning.semconv import AGL_REWARD, RAW_GEN_AI_REQUEST
from agentlightning.types import Span, Triplet

from .extraction import build_triplet_fields, prompt_token_ids_of, response_token_ids_of
from .llm_call import DEFAULT_LLM_CALL_MATCH, agent_name_of, looks_like_llm_call, response_id_of
from .report import AdaptationReport, DroppedLlmCall, DropReason, UnmatchedReward

__all__ = [
    "SpanNode",
    "RewardMatchPolicy",
    "LlmCall",
    "LlmCallMatcher",
    "find_llm_calls",
    "match_rewards",
    "reward_value_of",
    "drop_calls_without_token_ids",
]


class SpanNode(Protocol):
    """A node of a span tree, as the LLM-call search walks it; `tree.TraceTree` is one.

    A protocol rather than `TraceTree` itself, so this module needs nothing from `tree.py` (which builds
    on it): the two modules do not import each other.
    """

    @property
    def id(self) -> str: ...

    @property
    def span(self) -> Span: ...

    @property
    def synthetic(self) -> bool:
        """True for nodes invented for missing parents and for the virtual root."""
        ...

    @property
    def children(self) -> Sequence[SpanNode]: ...

    @property
    def start_time(self) -> float: ...

    @property
    def end_time(self) -> float: ...

    @property
    def parent(self) -> Optional[SpanNode]: ...

    def traverse(self) -> Sequence[SpanNode]:
        """This node and every node below it, pre-order."""
        ...


class RewardMatchPolicy(str, Enum):
    """How reward spans are attached to LLM calls."""

    FIRST_OCCURRENCE = "first_occurrence"
    """Across the whole trace in start-time order: a reward goes to the latest call that ended before it
    started and has no reward yet."""
    FIRST_SIBLING = "first_sibling"
    """The same rule, but only among calls that are siblings of the reward span (same parent)."""


@dataclass(eq=False)
class LlmCall:
    """One LLM call: the anchor node that places it in the tree plus every span that reported it."""

    anchor: SpanNode
    members: list[Span]
    response_id: Optional[str]
    agent_name: str
    reward: Optional[float] = None
    reward_dimensions: dict[str, float] = field(default_factory=dict)

    @property
    def span(self) -> Span:
        return self.anchor.span

    @cached_property
    def fields(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """Prompt, response and metadata merged from all member spans (computed once members are final)."""
        return build_triplet_fields(self.members)

    def has_token_ids(self) -> bool:
        prompt, response, _ = self.fields
        return bool(prompt["token_ids"]) and bool(response["token_ids"])

    def to_triplet(self) -> Triplet:
        """The call as a prompt/response/reward triplet with token ids, raw messages and metadata."""
        prompt, response, metadata = (dict(part) for part in self.fields)
        metadata.update(
            {
                "response_id": self.response_id,
                "agent_name": self.agent_name,
                "span_id": self.span.span_id,
                "sequence_id": self.span.sequence_id,
                "span_name": self.span.name,
            }
        )
        if len(self.members) > 1:
            metadata["merged_span_ids"] = [member.span_id for member in self.members[1:]]
        if len(self.reward_dimensions) > 1:
            metadata["rewards"] = dict(self.reward_dimensions)
        return Triplet(prompt=prompt, response=response, reward=self.reward, metadata=metadata)


@dataclass(frozen=True)
class LlmCallMatcher:
    """Which spans count as LLM calls to train on."""

    llm_call_match: str = DEFAULT_LLM_CALL_MATCH
    agent_match: Optional[str] = None
    exclude_llm_call_in_reward: bool = True
    detect_by_attributes: bool = True
    """Also treat spans carrying LLM request/response attributes as calls, whatever their name."""

    def name_matches(self, span: Span) -> bool:
        return re.search(self.llm_call_match, span.name) is not None

    def agent_matches(self, agent_name: str) -> bool:
        return self.agent_match is None or re.search(self.agent_match, agent_name) is not None


@dataclass(frozen=True)
class _Context:
    agent_name: str
    agent_ok: bool
    in_reward: bool
    call: Optional[LlmCall]


def reward_value_of(span: Span) -> Optional[float]:
    """The primary reward a span carries (AGL reward attributes or legacy payloads), else None."""
    return get_reward_value(span)


def _has_token_ids(span: Span) -> bool:
    return prompt_token_ids_of(span) is not None or response_token_ids_of(span) is not None


def _is_reward_container(span: Span) -> bool:
    return span.name == AGL_REWARD or is_reward_span(span)


def _drop(
    report: AdaptationReport, span: Span, reason: DropReason, detail: str = "", into: Optional[str] = None
) -> None:
    report.dropped.append(
        DroppedLlmCall(
            span_id=span.span_id,
            name=span.name,
            sequence_id=span.sequence_id,
            reason=reason,
            detail=detail,
            merged_into=into,
        )
    )


def find_llm_calls(tree: SpanNode, matcher: LlmCallMatcher, report: AdaptationReport) -> list[LlmCall]:
    """Depth-first search for LLM calls; merges the same call seen twice and reports what it leaves out."""
    calls: list[LlmCall] = []
    by_response_id: dict[str, LlmCall] = {}
    root_context = _Context(agent_name="", agent_ok=matcher.agent_match is None, in_reward=False, call=None)
    stack: list[tuple[SpanNode, _Context]] = [(tree, root_context)]
    while stack:
        node, context = stack.pop()
        span = node.span
        child_context = context
        if not node.synthetic:
            agent_name = agent_name_of(span)
            if agent_name is not None:
                child_context = replace(
                    child_context, agent_name=agent_name, agent_ok=matcher.agent_matches(agent_name)
                )
            child_context = _visit_llm_candidate(node, child_context, matcher, report, calls, by_response_id)
            if _is_reward_container(span):
                child_context = replace(child_context, in_reward=True)
        stack.extend((child, child_context) for child in reversed(node.children))
    calls.sort(key=lambda call: (call.anchor.start_time, call.span.sequence_id))
    return calls


def _visit_llm_candidate(
    node: SpanNode,
    context: _Context,
    matcher: LlmCallMatcher,
    report: AdaptationReport,
    calls: list[LlmCall],
    by_response_id: dict[str, LlmCall],
) -> _Context:
    """Classify one span; returns the context for its children (the call they belong to, if any)."""
    span = node.span
    if _is_raw_request_part(node, matcher):
        # LiteLLM's / the proxy's raw payload of the call its parent span records: part of that call, not
        # a second one (and not reported again when that call was left out).
        if context.call is not None:
            context.call.members.append(span)
        return context
    by_name = matcher.name_matches(span)
    by_attributes = looks_like_llm_call(span)
    if not by_name and not by_attributes:
        return context
    report.n_llm_spans += 1
    if not by_name and not matcher.detect_by_attributes and context.call is None:
        _drop(report, span, "name_not_matched", f"name does not match llm_call_match={matcher.llm_call_match!r}")
        return context
    if context.in_reward and matcher.exclude_llm_call_in_reward:
        _drop(report, span, "inside_reward_span", "made while computing a reward (exclude_llm_call_in_reward=True)")
        return context
    if not context.agent_ok:
        agent = context.agent_name or "<no agent>"
        _drop(report, span, "agent_filtered", f"agent {agent!r} does not match agent_match={matcher.agent_match!r}")
        return context

    response_id = response_id_of(span)
    if response_id is not None and response_id in by_response_id:
        existing = by_response_id[response_id]
        existing.members.append(span)
        _drop(report, span, "duplicate", f"response id {response_id} already seen", existing.span.span_id)
        return replace(context, call=existing)
    enclosing = context.call
    if (
        enclosing is not None
        and (enclosing.response_id is None or response_id is None or response_id == enclosing.response_id)
        # Two spans that each carry their own token ids are two generations (e.g. a retry inside one wrapper).
        and not (_has_token_ids(span) and any(_has_token_ids(member) for member in enclosing.members))
    ):
        enclosing.members.append(span)
        if response_id is not None and enclosing.response_id is None:
            enclosing.response_id = response_id
            by_response_id[response_id] = enclosing
        _drop(report, span, "nested_llm_call", "the same call seen by an outer span", enclosing.span.span_id)
        return context
    call = LlmCall(anchor=node, members=[span], response_id=response_id, agent_name=context.agent_name)
    calls.append(call)
    if response_id is not None:
        by_response_id[response_id] = call
    return replace(context, call=call)


def _is_raw_request_part(node: SpanNode, matcher: LlmCallMatcher) -> bool:
    """A `raw_gen_ai_request` span directly under an LLM-call span (v0.3's LiteLLM / LLM proxy shape)."""
    parent = node.parent
    if node.span.name != RAW_GEN_AI_REQUEST or parent is None or parent.synthetic:
        return False
    return matcher.name_matches(parent.span) or looks_like_llm_call(parent.span)


def drop_calls_without_token_ids(calls: Sequence[LlmCall], report: AdaptationReport) -> list[LlmCall]:
    """Keep calls with both prompt and response token ids; every span of a dropped call is reported
    as `no_token_ids` (replacing its earlier merge entry)."""
    kept: list[LlmCall] = []
    for call in calls:
        if call.has_token_ids():
            kept.append(call)
            continue
        anchor_id = call.span.span_id
        report.dropped = [entry for entry in report.dropped if entry.merged_into != anchor_id]
        member_ids = {member.span_id for member in call.members}
        for member in call.members:
            if member.name == RAW_GEN_AI_REQUEST and member.parent_id in member_ids:
                continue  # the raw payload of another member: not an LLM span of its own
            _drop(report, member, "no_token_ids", "no prompt or response token ids (_skip_empty_token_spans=True)")
    return kept


def match_rewards(
    tree: SpanNode, calls: Sequence[LlmCall], policy: RewardMatchPolicy, report: AdaptationReport
) -> None:
    """Attach each reward span to an LLM call per `policy`; rewards that find no call go to the report."""
    by_anchor = {id(call.anchor): call for call in calls}
    policy = RewardMatchPolicy(policy)
    if policy is RewardMatchPolicy.FIRST_OCCURRENCE:
        _assign_in_order(sorted(tree.traverse(), key=_order_key), by_anchor, report)
    else:
        _assign_in_order([tree], by_anchor, report)
        for parent in tree.traverse():
            _assign_in_order(parent.children, by_anchor, report)


_END_SLACK_S = 0.05
"""An instrumentation that ends its span in a callback (OpenTelemetry's Node.js OpenAI instrumentation) can
stamp the end a moment after the agent's code resumed and emitted its reward: a call that started before
the reward and ended within this many seconds after it still counts as ended before it."""


def _order_key(node: SpanNode) -> tuple[float, int]:
    return (node.start_time, node.span.sequence_id)


def _assign_in_order(nodes: Iterable[SpanNode], by_anchor: dict[int, LlmCall], report: AdaptationReport) -> None:
    seen: list[LlmCall] = []
    for node in nodes:
        call = by_anchor.get(id(node))
        if call is not None:
            seen.append(call)
            continue
        value = None if node.synthetic else reward_value_of(node.span)
        if value is None:
            continue
        report.n_reward_spans += 1
        target = next(
            (c for c in reversed(seen) if c.reward is None and c.anchor.end_time <= node.start_time + _END_SLACK_S),
            None,
        )
        if target is None:
            detail = "no unrewarded LLM call ended before it" if seen else "no LLM call precedes it"
            report.unmatched_rewards.append(
                UnmatchedReward(span_id=node.id, sequence_id=node.span.sequence_id, value=value, detail=detail)
            )
            continue
        target.reward = value
        target.reward_dimensions = _dimensions(node.span)


def _dimensions(span: Span) -> dict[str, float]:
    try:
        return {reward.name: reward.value for reward in get_rewards_from_span(span)}
    except (ValueError, TypeError):
        return {}
