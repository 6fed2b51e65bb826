"""What `LightningStoreClient` sends: arguments checked as an in-process store checks them, spans encoded to fit.

JSON would carry NaN and infinity as `null` (see `store._finite`), so the client applies the store's
rules before sending: it raises exactly what an in-process store raises. A span is encoded after the
store's own normalisation and, when larger than a request may be, cut to fit (`_span_fit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter

from agentlightning.store._arguments import coerce_config, coerce_span, coerce_stats
from agentlightning.store._finite import check_finite, check_finite_number
from agentlightning.types import Span

from ._span_fit import fit_span

__all__ = ["REQUEST_ENVELOPE_BYTES", "checked_config", "check_documents", "encoded_span"]

# Bytes a span batch may need around its spans: the brackets and `{"status": ..., "spans": }` of `/finish`.
REQUEST_ENVELOPE_BYTES = 64

_SPAN: TypeAdapter[Span] = TypeAdapter(Span)


def _encode(span: Span) -> bytes:
    return _SPAN.dump_json(span, serialize_as_any=True)


def encoded_span(span: Span, max_body_size: int) -> bytes:
    """The span as JSON for a request of at most `max_body_size` bytes, cut to fit one (never dropped)."""
    return fit_span(coerce_span(span), max_body_size - REQUEST_ENVELOPE_BYTES, _encode)[1]


def checked_config(config: Any) -> Any:
    """A config validated here, so values JSON cannot carry (NaN, infinity) fail as they would in process."""
    return None if config is None else coerce_config(config)


def check_documents(fields: dict[str, Any], prefix: str = "") -> None:
    """Apply the store's rules for NaN / infinity to a call's arguments (`fields`, changed in place).

    Documents are refused with the error an in-process store raises; `heartbeat_stats` is replaced by
    its encoded form (spans go through `encoded_span`).
    """
    for name in ("input", "metadata"):
        if fields.get(name) is not None:
            check_finite(fields[name], prefix + name)
    if "last_heartbeat_time" in fields:
        check_finite_number(fields["last_heartbeat_time"], "last_heartbeat_time")
    if fields.get("heartbeat_stats") is not None:
        fields["heartbeat_stats"] = coerce_stats(fields["heartbeat_stats"])


def span_batches(spans: Sequence[Span], max_body_size: int) -> list[bytes]:
    """JSON arrays of the spans, each at most `max_body_size` bytes (a single larger span goes alone)."""
    batches: list[bytes] = []
    current: list[bytes] = []
    size = 2  # the brackets
    for span in spans:
        encoded = encoded_span(span, max_body_size)
        if current and size + len(encoded) + 1 > max_body_size:
            batches.append(b"[" + b",".join(current) + b"]")
            current, size = [], 2
        current.append(encoded)
        size += len(encoded) + 1
    if current:
        batches.append(b"[" + b",".join(current) + b"]")
    return batches
