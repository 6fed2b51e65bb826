"""A span larger than one request may carry is cut to fit, never dropped: the LLM call it records happened.

Only the largest attribute values (a huge prompt, a long token id list) are shortened, each to the same
size, just enough to fit; a string keeps its beginning and ends with a marker saying how much was cut,
a list keeps its first items. Events that are among the largest parts are dropped as a whole. The span
then names what was cut (`agentlightning.truncated_attributes`, `events` included) and its size before
(`agentlightning.original_span_bytes`).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import pydantic_core

from agentlightning.semconv import AGL_ORIGINAL_SPAN_BYTES, AGL_TRUNCATED_ATTRIBUTES
from agentlightning.types import Span

__all__ = ["fit_span"]

logger = logging.getLogger(__name__)

_MAX_PASSES = 64
_MARKER_ROOM = 128  # bytes a marker and the two bookkeeping attributes may add
_EVENTS = "events"  # the span's events, dropped as a whole when they are among the largest parts


def _size(value: Any) -> int:
    try:
        return len(pydantic_core.to_json(value))
    except pydantic_core.PydanticSerializationError:
        return len(str(value))


def _shrink(value: Any, size: int, target: int) -> Any:
    """`value` (of encoded `size` bytes) cut to about `target` bytes."""
    target = max(0, target)
    if isinstance(value, str):
        kept = value.encode("utf-8")[:target].decode("utf-8", "ignore")
        return f"{kept}...[truncated by agentlightning: {size - len(kept)} of {size} bytes cut]"
    if isinstance(value, (list, tuple)):
        items: list[Any] = list(value)  # type: ignore[arg-type]
        return items[: len(items) * target // size] if size else []
    return str(value)[:target]


def _cap(sizes: list[int], excess: int) -> int:
    """The size to cut every value larger than it down to, so the cuts add up to `excess` (water-filling)."""
    ordered = sorted(sizes, reverse=True)
    total = 0
    for count, size in enumerate(ordered, start=1):
        total += size
        cap = (total - excess) // count
        following = ordered[count] if count < len(ordered) else 0
        if cap >= following:
            return max(0, cap)
    return 0


_BOOKKEEPING = (AGL_TRUNCATED_ATTRIBUTES, AGL_ORIGINAL_SPAN_BYTES)


def fit_span(span: Span, max_bytes: int, encode: Callable[[Span], bytes]) -> tuple[Span, bytes]:
    """The span and its encoding, cut to at most `max_bytes` when it is larger (see module docs)."""
    encoded = encode(span)
    if len(encoded) <= max_bytes:
        return span, encoded
    original = len(encoded)
    attributes: dict[str, Any] = dict(span.attributes)
    cut: list[str] = []
    events = span.events
    for _ in range(_MAX_PASSES):
        excess = len(encoded) - max_bytes + _MARKER_ROOM
        sizes = {key: _size(value) for key, value in attributes.items() if key not in _BOOKKEEPING}
        if events:
            sizes[_EVENTS] = _size([event.model_dump() for event in events])
        cap = _cap(list(sizes.values()), excess)
        shrunk = False
        for key, size in sizes.items():
            if size <= max(cap, _MARKER_ROOM):
                continue
            if key == _EVENTS:
                events = []
            else:
                attributes[key] = _shrink(attributes[key], size, cap - _MARKER_ROOM)
            cut.append(key)
            shrunk = True
        if not shrunk:
            break
        bookkeeping = {AGL_TRUNCATED_ATTRIBUTES: sorted(set(cut)), AGL_ORIGINAL_SPAN_BYTES: original}
        span = span.model_copy(update={"attributes": {**attributes, **bookkeeping}, "events": events})
        encoded = encode(span)
        if len(encoded) <= max_bytes:
            break
    logger.warning(
        "span %s (%s) of rollout %s is %d bytes, over the %d a store request may carry; cut to %d bytes: %s "
        "(listed in its %s attribute)",
        span.span_id,
        span.name,
        span.rollout_id,
        original,
        max_bytes,
        len(encoded),
        ", ".join(sorted(set(cut))),
        AGL_TRUNCATED_ATTRIBUTES,
    )
    return span, encoded
