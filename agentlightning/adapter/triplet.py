"""Span -> triplet adapters: one prompt/response/reward triplet per LLM call, for RL.

`TracerTraceToTriplet` reads the span tree a tracer produced; `LlmProxyTraceToTriplet` reads the flat,
sequence-ordered spans the LLM proxy writes. Both fill `last_report` with what they left out and why.
"""

from __future__ import annotations

import logging
import re
from abc import abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional, Union

from opentelemetry.sdk.trace import ReadableSpan

from agentlightning.semconv import RAW_GEN_AI_REQUEST
from agentlightning.types import Span, Triplet

from .base import DUMMY_ROLLOUT_ID, TraceAdapter, normalize_spans
from .calls import LlmCall, RewardMatchPolicy, drop_calls_without_token_ids, reward_value_of
from .llm_call import DEFAULT_LLM_CALL_MATCH, looks_like_llm_call, response_id_of
from .report import AdaptationReport, DroppedLlmCall, UnmatchedReward, check_token_drift
from .retokenize import retokenize_triplets
from .tree import TraceTree

__all__ = [
    "TraceTree",
    "RewardMatchPolicy",
    "TraceToTripletBase",
    "TracerTraceToTriplet",
    "LlmProxyTraceToTriplet",
]

logger = logging.getLogger(__name__)

SpanInput = Iterable[Union[Span, ReadableSpan]]
"""Spans of one rollout: a list, or `store.query_spans(...)`'s PaginatedResult; OpenTelemetry spans work too."""


class TraceToTripletBase(TraceAdapter[list[Triplet]]):
    """Base for adapters producing triplets; `adapt` logs and keeps the `AdaptationReport` in `last_report`."""

    def __init__(self) -> None:
        self.last_report: Optional[AdaptationReport] = None

    def __call__(self, source: SpanInput, /) -> list[Triplet]:  # type: ignore[override]
        return self.adapt(source)

    def adapt(self, source: SpanInput, /) -> list[Triplet]:  # type: ignore[override]
        """Triplets for one rollout's spans; see `last_report` (or `adapt_with_report`) for what was left out."""
        spans = normalize_spans(source)
        triplets, report = self.adapt_with_report(spans)
        self.last_report = report
        rollout_ids = {span.rollout_id for span in spans if span.rollout_id and span.rollout_id != DUMMY_ROLLOUT_ID}
        report.log(logger, context=", ".join(sorted(rollout_ids)))
        return triplets

    @abstractmethod
    def adapt_with_report(self, source: SpanInput, /) -> tuple[list[Triplet], AdaptationReport]:
        """Triplets and the report for this call (thread-safe: does not touch `last_report`)."""


class TracerTraceToTriplet(TraceToTripletBase):
    """Tracer spans -> triplets, following the span tree (SPEC section 9).

    Args:
        repair_hierarchy: re-parent top-level spans under the tightest span containing them in time.
        llm_call_match: regex on span names of LLM calls. With the default, spans carrying LLM
            request/response attributes count too, whatever their name (LangChain, OpenInference...).
        agent_match: regex on agent names; only calls inside a matching agent are kept (None keeps all).
        exclude_llm_call_in_reward: leave out calls made under a reward span (e.g. an LLM judge).
        reward_match: how reward spans are attached to calls.
        _skip_empty_token_spans: leave out calls lacking prompt or response token ids.
        detect_llm_calls_by_attributes: override whether attribute-based detection is on (default: on
            only with the default `llm_call_match`; with a custom pattern, LLM-looking spans whose name does
            not match are reported as `name_not_matched`).
        check_token_drift: report turns whose prompt ids do not extend the previous turn's ids.
        tokenizer: the policy's Hugging Face tokenizer; calls recorded without token ids (e.g. by the
            official OpenTelemetry GenAI instrumentations) get ids rebuilt from their messages, flagged
            `metadata["token_ids_source"] == "retokenized"` and counted in the report (see `retokenize.py`).
    """

    def __init__(
        self,
        repair_hierarchy: bool = True,
        llm_call_match: str = DEFAULT_LLM_CALL_MATCH,
        agent_match: Optional[str] = None,
        exclude_llm_call_in_reward: bool = True,
        reward_match: RewardMatchPolicy = RewardMatchPolicy.FIRST_OCCURRENCE,
        _skip_empty_token_spans: bool = False,
        *,
        detect_llm_calls_by_attributes: Optional[bool] = None,
        check_token_drift: bool = True,
        tokenizer: Any = None,
    ) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.repair_hierarchy = repair_hierarchy
        self.llm_call_match = llm_call_match
        self.agent_match = agent_match
        self.exclude_llm_call_in_reward = exclude_llm_call_in_reward
        self.reward_match = RewardMatchPolicy(reward_match)
        self._skip_empty_token_spans = _skip_empty_token_spans
        self.detect_llm_calls_by_attributes = (
            llm_call_match == DEFAULT_LLM_CALL_MATCH
            if detect_llm_calls_by_attributes is None
            else detect_llm_calls_by_attributes
        )
        self.check_token_drift = check_token_drift

    def to_tree(self, spans: SpanInput) -> TraceTree:
        """The (optionally repaired) span tree the triplets are read from."""
        tree = TraceTree.from_spans(_unique_spans(normalize_spans(spans), None))
        if self.repair_hierarchy:
            tree.repair_hierarchy()
        return tree

    def visualize(
        self, spans: SpanInput, filename: Union[str, Path], interested_span_match: Optional[str] = None
    ) -> Path:
        """Draw the span tree (graphviz PNG, or a text tree when graphviz is unavailable)."""
        return self.to_tree(spans).visualize(filename, interested_span_match)

    def adapt_with_report(self, source: SpanInput, /) -> tuple[list[Triplet], AdaptationReport]:
        spans = normalize_spans(source)
        report = AdaptationReport(adapter=type(self).__name__, n_spans=len(spans))
        if not spans:
            return [], report
        tree = TraceTree.from_spans(_unique_spans(spans, report))
        if self.repair_hierarchy:
            tree.repair_hierarchy()
        triplets = tree.to_trajectory(
            llm_call_match=self.llm_call_match,
            agent_match=self.agent_match,
            exclude_llm_call_in_reward=self.exclude_llm_call_in_reward,
            reward_match=self.reward_match,
            _skip_empty_token_spans=self._skip_empty_token_spans,
            detect_llm_calls_by_attributes=self.detect_llm_calls_by_attributes,
            report=report,
        )
        if self.tokenizer is not None:
            triplets, report.n_triplets_retokenized = retokenize_triplets(triplets, self.tokenizer)
            report.n_triplets_without_token_ids = sum(
                1 for t in triplets if not t.prompt.get("token_ids") or not t.response.get("token_ids")
            )
        if self.check_token_drift:
            report.token_drift = check_token_drift(triplets)
        return triplets, report


class LlmProxyTraceToTriplet(TraceToTripletBase):
    """LLM-proxy spans -> triplets, ordered by sequence id only (clocks of different machines disagree).

    LLM calls are LiteLLM's `raw_gen_ai_request` / `litellm_request` spans and our proxy's
    `openai.chat.completion` spans (or anything carrying LLM request/response attributes). Spans of one
    request (same sequence id, parent/child, or same response id) form one call. Each reward goes to the
    latest call without a reward whose sequence id is smaller than the reward's.

    A call seen only as LiteLLM's `litellm_request` summary span, without token ids, is dropped and
    reported (`no_token_ids`) rather than emitted as a triplet with nothing to train on; its token ids
    come with the `raw_gen_ai_request` child (or with `return_token_ids` on the backend).
    """

    def __init__(self, llm_call_match: str = DEFAULT_LLM_CALL_MATCH, _skip_empty_token_spans: bool = False) -> None:
        super().__init__()
        self.llm_call_match = llm_call_match
        self._skip_empty_token_spans = _skip_empty_token_spans

    def adapt_with_report(self, source: SpanInput, /) -> tuple[list[Triplet], AdaptationReport]:
        spans = normalize_spans(source)
        report = AdaptationReport(adapter=type(self).__name__, n_spans=len(spans))
        ordered = sorted(enumerate(_unique_spans(spans, report)), key=lambda pair: (pair[1].sequence_id, pair[0]))
        candidates = [
            span for _, span in ordered if re.search(self.llm_call_match, span.name) or looks_like_llm_call(span)
        ]
        candidate_ids = {span.span_id for span in candidates}
        # A raw_gen_ai_request under its call's span is part of that call, not another LLM span.
        raw_parts = {s.span_id for s in candidates if s.name == RAW_GEN_AI_REQUEST and s.parent_id in candidate_ids}
        report.n_llm_spans += len(candidates) - len(raw_parts)
        calls = self._group_calls(candidates, report, raw_parts)
        calls = _drop_bare_litellm_requests(calls, report)
        if self._skip_empty_token_spans:
            calls = drop_calls_without_token_ids(calls, report)
        for _, span in ordered:
            if span.span_id in candidate_ids:
                continue
            value = reward_value_of(span)
            if value is None:
                continue
            report.n_reward_spans += 1
            target = next(
                (c for c in reversed(calls) if c.reward is None and _first_sequence_id(c) < span.sequence_id), None
            )
            if target is None:
                report.unmatched_rewards.append(
                    UnmatchedReward(
                        span_id=span.span_id,
                        sequence_id=span.sequence_id,
                        value=value,
                        detail="no unrewarded LLM call has a smaller sequence id",
                    )
                )
            else:
                target.reward = value
        triplets = [call.to_triplet() for call in calls]
        report.n_triplets = len(triplets)
        report.n_triplets_without_token_ids = sum(
            1 for t in triplets if not t.prompt["token_ids"] or not t.response["token_ids"]
        )
        report.token_drift = check_token_drift(triplets)
        return triplets, report

    @staticmethod
    def _group_calls(candidates: list[Span], report: AdaptationReport, raw_parts: set[str]) -> list[LlmCall]:
        """Union spans of the same request: same sequence id, parent/child, or same response id.

        Members in `raw_parts` (raw request payloads of their parent call) are merged without a report entry.
        """
        parent_of = {span.span_id: span.parent_id for span in candidates}
        group_of: dict[str, str] = {}

        def find(span_id: str) -> str:
            while group_of.get(span_id, span_id) != span_id:
                span_id = group_of[span_id]
            return span_id

        def union(a: str, b: str) -> None:
            root_a, root_b = find(a), find(b)
            if root_a != root_b:
                group_of[root_b] = root_a

        first_by_key: dict[tuple[str, object], str] = {}
        for span in candidates:
            group_of.setdefault(span.span_id, span.span_id)
            keys: list[tuple[str, object]] = [("seq", span.sequence_id)]
            response_id = response_id_of(span)
            if response_id is not None:
                keys.append(("rid", response_id))
            for key in keys:
                if key in first_by_key:
                    union(first_by_key[key], span.span_id)
                else:
                    first_by_key[key] = span.span_id
            if span.parent_id in parent_of:
                union(span.parent_id, span.span_id)  # type: ignore[arg-type]

        groups: dict[str, list[Span]] = {}
        for span in candidates:
            groups.setdefault(find(span.span_id), []).append(span)
        calls: list[LlmCall] = []
        for members in groups.values():
            member_ids = {m.span_id for m in members}
            anchor = next((m for m in members if m.parent_id not in member_ids), members[0])
            ordered_members = [anchor, *(m for m in members if m is not anchor)]
            response_id = next((r for r in map(response_id_of, ordered_members) if r is not None), None)
            calls.append(
                LlmCall(
                    anchor=TraceTree(anchor.span_id, anchor),
                    members=ordered_members,
                    response_id=response_id,
                    agent_name="",
                )
            )
            for member in ordered_members[1:]:
                if member.span_id in raw_parts:
                    continue
                reason = "nested_llm_call" if member.parent_id in member_ids else "duplicate"
                report.dropped.append(
                    _drop(member, reason, "another span of the same proxy request", merged_into=anchor.span_id)
                )
        calls.sort(key=_first_sequence_id)
        return calls


def _first_sequence_id(call: LlmCall) -> int:
    return min(member.sequence_id for member in call.members)


def _drop(span: Span, reason: str, detail: str, merged_into: Optional[str] = None) -> DroppedLlmCall:
    return DroppedLlmCall(
        span_id=span.span_id,
        name=span.name,
        sequence_id=span.sequence_id,
        reason=reason,  # type: ignore[arg-type]
        detail=detail,
        merged_into=merged_into,
    )


def _unique_spans(spans: list[Span], report: Optional[AdaptationReport]) -> list[Span]:
    """Drop second copies of a span id (a span stored twice), reporting LLM-looking ones as duplicates."""
    seen: set[str] = set()
    unique: list[Span] = []
    for span in spans:
        if span.span_id in seen:
            if report is not None and looks_like_llm_call(span):
                report.n_llm_spans += 1
                report.dropped.append(_drop(span, "duplicate", "the same span id was stored twice", span.span_id))
            continue
        seen.add(span.span_id)
        unique.append(span)
    return unique


LITELLM_SUMMARY_SPAN = "litellm_request"


def _drop_bare_litellm_requests(calls: list[LlmCall], report: AdaptationReport) -> list[LlmCall]:
    """Drop calls made only of `litellm_request` spans that carry no token ids (reported, never silent)."""
    kept: list[LlmCall] = []
    for call in calls:
        if call.has_token_ids() or any(member.name != LITELLM_SUMMARY_SPAN for member in call.members):
            kept.append(call)
            continue
        anchor_id = call.span.span_id
        report.dropped = [entry for entry in report.dropped if entry.merged_into != anchor_id]
        for member in call.members:
            report.dropped.append(
                DroppedLlmCall(
                    span_id=member.span_id,
                    name=member.name,
                    sequence_id=member.sequence_id,
                    reason="no_token_ids",
                    detail="litellm_request span without token ids and without its raw_gen_ai_request child",
                )
            )
    return kept
