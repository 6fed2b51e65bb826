"""NaN and infinity in what a store keeps: refused in documents, written as strings in telemetry.

JSON has no NaN or infinity: serialisers turn them into `null` (which a span attribute may not be) or
into tokens that SQLite's JSON functions, PostgreSQL's JSONB and browsers refuse. So no such number
reaches a backend:

- documents a caller writes on purpose (rollout inputs and metadata, attempt metadata, resources, heartbeat
  times) are refused with a `ValueError` naming the field, e.g. `input['x']`;
- telemetry recorded after the fact (span attributes, events, links, resource attributes, worker heartbeat
  stats) keeps the value as the string `"NaN"`, `"Infinity"` or `"-Infinity"` (`float()` reads each back),
  so a span is never lost for a number in it. A list holding one has all its floats written as text
  (`[-0.5, -inf]` -> `["-0.5", "-Infinity"]`): a list mixing floats and numeric strings would be read
  back as floats by pydantic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional

import pydantic_core

from agentlightning.types.tracer import Event, Link, Span

__all__ = [
    "NON_FINITE_STRINGS",
    "check_dequeue_wait",
    "check_finite",
    "check_finite_number",
    "check_wait_timeout",
    "encode_non_finite",
    "finite_span",
]

#: How a non-finite number is written in telemetry (the spellings of JavaScript and Python's json module).
NON_FINITE_STRINGS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _non_finite(value: float) -> bool:
    return value != value or value in (math.inf, -math.inf)


def _may_hold_non_finite(value: Any) -> bool:
    """A fast (native) first look: False means `value` surely holds no NaN / infinity.

    Serialising with NaN / infinity as bare tokens is ~20x faster than walking the value in Python; a
    string that merely contains "NaN" sends it to the walk, which then finds nothing.
    """
    if isinstance(value, (str, int)) or value is None:
        return False
    try:
        encoded = pydantic_core.to_json(value, inf_nan_mode="constants")
    except Exception:  # something JSON cannot hold: let the walk decide
        return True
    return b"NaN" in encoded or b"Infinity" in encoded


def _find(value: Any) -> Optional[list[Any]]:
    """The path (innermost key first) to the first non-finite number in `value`, or None when there is none."""
    if isinstance(value, float):
        return [] if _non_finite(value) else None
    if isinstance(value, Mapping):
        for key, item in value.items():  # type: ignore[union-attr]
            if isinstance(item, (float, Mapping, list, tuple)):
                found = _find(item)
                if found is not None:
                    found.append(key)
                    return found
        return None
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):  # type: ignore[arg-type]
            if isinstance(item, (float, Mapping, list, tuple)):
                found = _find(item)
                if found is not None:
                    found.append(index)
                    return found
    return None


def _at(path: list[Any]) -> str:
    return "".join(f"[{key!r}]" for key in reversed(path))


def check_finite(value: Any, field: str) -> None:
    """Refuse NaN and +-infinity anywhere in a document, naming where (`input['scores'][2]`)."""
    path = _find(value) if _may_hold_non_finite(value) else None
    if path is None:
        return
    bad = value
    for key in reversed(path):
        bad = bad[key]
    raise ValueError(
        f"{field}{_at(path)} is {bad!r}: a store keeps documents as JSON, which has no NaN or infinity; "
        "send a finite number, None, or a string"
    )


def check_finite_number(value: Any, field: str) -> None:
    """Refuse a non-finite time or duration (a number field of a record, not a document)."""
    if isinstance(value, float) and _non_finite(value):
        raise ValueError(f"{field} must be a finite number, got {value!r}")


def check_wait_timeout(timeout: Any) -> Optional[float]:
    """The deadline of `wait_for_rollouts` in seconds: None (or +inf) waits without one; NaN and negatives are refused."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or math.isnan(timeout) or timeout < 0:
        raise ValueError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    return None if math.isinf(timeout) else float(timeout)


def check_dequeue_wait(timeout: Any) -> float:
    """How long `wait_for_dequeue` may wait for work, in seconds: a finite number >= 0."""
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or math.isnan(timeout)
        or math.isinf(timeout)
        or timeout < 0
    ):
        raise ValueError(f"timeout must be a finite number of seconds >= 0, got {timeout!r}")
    return float(timeout)


def _text(value: float) -> str:
    if not _non_finite(value):
        return repr(float(value))
    return NON_FINITE_STRINGS["nan" if value != value else "inf" if value > 0 else "-inf"]


def _encode(value: Any) -> Any:
    if isinstance(value, float):
        return _text(value) if _non_finite(value) else value
    if isinstance(value, Mapping):
        return {key: _encode(item) for key, item in value.items()}  # type: ignore[union-attr]
    if isinstance(value, (list, tuple)):
        items: list[Any] = list(value)  # type: ignore[arg-type]
        if any(isinstance(item, float) and _non_finite(item) for item in items):
            # All numbers as text: a list mixing floats and numeric strings would be read back as floats.
            return [_text(item) if isinstance(item, float) else _encode(item) for item in items]
        return [_encode(item) for item in items]
    return value


def encode_non_finite(value: Any) -> Any:
    """`value` itself when it holds no NaN / infinity, else a copy with each written as a string."""
    if not _may_hold_non_finite(value) or _find(value) is None:
        return value
    return _encode(value)


def _finite_event(event: Event, index: int) -> Event:
    check_finite_number(event.timestamp, f"events[{index}].timestamp")
    attributes = encode_non_finite(event.attributes)
    extra = event.model_extra or {}
    encoded_extra = encode_non_finite(extra)
    if attributes is event.attributes and encoded_extra is extra:
        return event
    return event.model_copy(update={"attributes": attributes, **encoded_extra})


def _finite_link(link: Link) -> Link:
    attributes = encode_non_finite(link.attributes)
    return link if attributes is link.attributes else link.model_copy(update={"attributes": attributes})


def finite_span(span: Span) -> Span:
    """The span with every non-finite number in its telemetry written as a string; non-finite times are refused."""
    check_finite_number(span.start_time, "start_time")
    check_finite_number(span.end_time, "end_time")
    changes: dict[str, Any] = {}
    attributes = encode_non_finite(span.attributes)
    if attributes is not span.attributes:
        changes["attributes"] = attributes
    if span.events:
        events = [_finite_event(event, i) for i, event in enumerate(span.events)]
        if any(new is not old for new, old in zip(events, span.events, strict=True)):
            changes["events"] = events
    if span.links:
        links = [_finite_link(link) for link in span.links]
        if any(new is not old for new, old in zip(links, span.links, strict=True)):
            changes["links"] = links
    resource_attributes = encode_non_finite(span.resource.attributes)
    if resource_attributes is not span.resource.attributes:
        changes["resource"] = span.resource.model_copy(update={"attributes": resource_attributes})
    extra = span.model_extra or {}
    if extra:
        encoded_extra = encode_non_finite(extra)
        if encoded_extra is not extra:
            changes.update(encoded_extra)
    return span.model_copy(update=changes) if changes else span
