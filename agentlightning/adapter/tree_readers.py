"""v0.3's per-node readers of a `TraceTree` (agent name, reward payload, image URLs, span -> triplet, JSON).

Thin functions over the adapter's own readers (`llm_call`, `extraction`, `attributes.rewards`), so
`TraceTree`'s v0.3 methods and the adapters read spans the same way.
"""

from __future__ import annotations

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
]


class _Node(Protocol):
    id: str
    span: Span

    @property
    def children(self) -> Sequence[_Node]: ...


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
