"""v0.3's per-node readers of a `TraceTree` (agent name, reward payload, image URLs, span -> triplet, JSON).

Thin functions over the adapter's own readers (`llm_call`, `extraction`, `attributes.rewards`), so
`TraceTree`'s v0.3 methods and the adapters read spans the same way.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Optional, Protocol

from agentlightning.attributes.rewards import get_reward_value
from agentlightning.semconv import AGL_OPERATION, AGL_REWARD, LightningSpanAttributes
from agentlightning.types import Span, Triplet

from .extraction import build_triplet_fields, image_urls_of
from .llm_call import agent_name_of, response_id_of

__all__ = [
    "span_agent_name",
    "span_reward_dict",
    "span_is_reward",
    "prompt_image_urls",
    "span_to_triplet",
    "tree_to_json",
    "v03_llm_calls",
]


class _Node(Protocol):
    id: str
    span: Span

    @property
    def children(self) -> Sequence[_Node]: ...


class _TreeNode(_Node, Protocol):
    def agent_name(self) -> Optional[str]: ...

    def is_reward_span(self) -> bool: ...


def v03_llm_calls(
    node: _TreeNode,
    llm_call_match: str,
    agent_match: Optional[str],
    within_matching_subtree: Optional[str] = None,
    within_reward: Optional[bool] = None,
    within_llm_call: Optional[bool] = None,
    existing_llm_call_response_ids: Optional[set[str]] = None,
) -> list[tuple[Any, str]]:
    """v0.3's `TraceTree.find_llm_calls(llm_call_match=..., ...)`: the `(node, agent name)` pairs.

    A span is an LLM call when its name matches `llm_call_match`, it lies under an agent span whose name
    matches `agent_match` (any agent when None) and, with `within_reward` given, not under a reward span.
    With `within_llm_call` given, spans under a call count only with a response id; a response id seen
    before (`existing_llm_call_response_ids`, filled as calls are found) is the same call again.
    """
    calls: list[tuple[Any, str]] = []
    seen = existing_llm_call_response_ids
    if within_matching_subtree is not None and within_reward is not True and re.search(llm_call_match, node.span.name):
        response_id = response_id_of(node.span)
        repeated = response_id is not None and seen is not None and response_id in seen
        if not repeated and (response_id is not None or within_llm_call is not True):
            calls.append((node, within_matching_subtree))
            seen = set() if seen is None else seen
            if response_id is not None:
                seen.add(response_id)
            if within_llm_call is not None:
                within_llm_call = True
    agent = node.agent_name()
    if agent is not None:
        within_matching_subtree = agent if agent_match is None or re.search(agent_match, agent) else None
    if within_reward is not None and node.is_reward_span():
        within_reward = True
    for child in node.children:
        calls.extend(
            v03_llm_calls(
                child,  # pyright: ignore[reportArgumentType]
                llm_call_match,
                agent_match,
                within_matching_subtree,
                within_reward,
                within_llm_call,
                seen,
            )
        )
    return calls


def span_agent_name(span: Span) -> Optional[str]:
    """The agent a span represents in any supported framework, or None."""
    return agent_name_of(span)


def span_reward_dict(span: Span) -> dict[str, Any]:
    """v0.3's reward payload: `{"type": "reward", "value": <float>}`, or `{}` when the span carries no reward."""
    value = get_reward_value(span)
    return {} if value is None else {"type": "reward", "value": value}


def span_is_reward(span: Span) -> bool:
    """A reward value on the span, or the operation span of a `@reward` function (even before its value)."""
    if get_reward_value(span) is not None:
        return True
    return (
        span.name == AGL_OPERATION and span.attributes.get(LightningSpanAttributes.OPERATION_NAME.value) == AGL_REWARD
    )


def prompt_image_urls(prompt_raw_content: Any) -> list[str]:
    """URLs of the `image_url` parts of prompt messages (a list, a `{"0": ..., "1": ...}` dict, JSON text)."""
    return image_urls_of(prompt_raw_content) if prompt_raw_content is not None else []


def span_to_triplet(span: Span, agent_name: str) -> Triplet:
    """One LLM-call span as a triplet: prompt/response token ids, raw content, image URLs, logprobs, metadata
    (`request`, `response`, `usage` when present, `response_id`, `agent_name`); the reward is left None."""
    prompt, response, metadata = build_triplet_fields([span])
    metadata.update(response_id=response_id_of(span), agent_name=agent_name)
    return Triplet(prompt=prompt, response=response, reward=None, metadata=metadata)


def tree_to_json(root: _Node) -> dict[str, Any]:
    """`{"id", "span": span.model_dump(), "children": [...]}` for a node and its subtree (iterative)."""
    result: dict[str, Any] = {"id": root.id, "span": root.span.model_dump(), "children": []}
    stack: list[tuple[_Node, dict[str, Any]]] = [(root, result)]
    while stack:
        node, out = stack.pop()
        for child in node.children:
            converted: dict[str, Any] = {"id": child.id, "span": child.span.model_dump(), "children": []}
            out["children"].append(converted)
            stack.append((child, converted))
    return result
