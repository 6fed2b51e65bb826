"""Callbacks: per-LLM-call hooks that adjust the forwarded request and act on the finished call.

Aliases accepted by `LLMProxy(callbacks=[...])`: `return_token_ids` (default), `opentelemetry` (default;
records each call as a span, with its `raw_gen_ai_request` child, in the store), `logprobs`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union

from .call import ProxyCall
from .spans import build_call_span, build_raw_request_span

if TYPE_CHECKING:
    from .runtime import ProxyRuntime

__all__ = [
    "ProxyCallback",
    "ReturnTokenIdsCallback",
    "LogprobsCallback",
    "LightningOpenTelemetry",
    "CALLBACK_ALIASES",
    "DEFAULT_CALLBACKS",
    "resolve_callbacks",
]

logger = logging.getLogger(__name__)


class ProxyCallback:
    """Base class: override `on_request` (sync, before forwarding) and/or `on_call_end` (after the call).

    `on_call_end` runs before the end of the response reaches the client, so a slow callback delays it.
    """

    def on_request(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        """Adjust `call.body` (what the backend receives) before it is forwarded."""

    async def on_call_end(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        """Act on the finished call (`call.response` / `call.error` are set)."""


class ReturnTokenIdsCallback(ProxyCallback):
    """Ask the backend for prompt and response token ids (`return_token_ids: true`, vLLM >= 0.10.2)."""

    def on_request(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        call.body.setdefault("return_token_ids", True)


class LogprobsCallback(ProxyCallback):
    """Ask the backend for the logprobs of the generated tokens (and `top_logprobs` alternatives if set).

    Values the client chose itself are kept.
    """

    def __init__(self, top_logprobs: Optional[int] = None) -> None:
        if top_logprobs is not None and top_logprobs < 0:
            raise ValueError(f"top_logprobs must be >= 0, got {top_logprobs}")
        self.top_logprobs = top_logprobs

    def on_request(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        if call.kind == "chat":
            call.body.setdefault("logprobs", True)
            if self.top_logprobs:
                call.body.setdefault("top_logprobs", self.top_logprobs)
        else:
            call.body.setdefault("logprobs", self.top_logprobs if self.top_logprobs is not None else 1)


class LightningOpenTelemetry(ProxyCallback):
    """Record each call of a rollout attempt in the store (via `LightningSpanExporter`).

    The call span carries the rollout and attempt from the route, the sequence id allocated when the
    request arrived, and the request/response attributes of our OpenAI instrumentation. A successful call
    also gets v0.3's `raw_gen_ai_request` child span (the backend payloads as `llm.<provider>.<key>`, same
    sequence id; see `spans.build_raw_request_span`) unless `record_raw_request=False`. With
    `wait_for_store` (default) the end of the response is held back until the spans are stored, so an agent
    (and the runner finishing its rollout) never gets ahead of its own spans; without it, spans are written
    in the background. Calls outside any rollout are not recorded.
    """

    def __init__(self, wait_for_store: bool = True, record_raw_request: bool = True) -> None:
        self.wait_for_store = wait_for_store
        self.record_raw_request = record_raw_request

    async def on_call_end(self, call: ProxyCall, runtime: ProxyRuntime) -> None:
        exporter = runtime.exporter
        if not call.is_attributed or exporter is None:
            return
        try:
            sequence_id = await runtime.sequence_id(call)
        except Exception as exc:
            logger.warning(
                "no sequence id for the call of rollout %r attempt %r (%s: %s); its span is not recorded",
                call.rollout_id,
                call.attempt_id,
                type(exc).__name__,
                exc,
            )
            return
        span = build_call_span(call, sequence_id)
        raw = build_raw_request_span(call, span) if self.record_raw_request else None
        spans = [span] if raw is None else [span, raw]
        if self.wait_for_store:
            await exporter.export_many(spans)
        else:
            for item in spans:
                exporter.export_nowait(item)


P = TypeVar("P")

CALLBACK_ALIASES: dict[str, type[ProxyCallback]] = {
    "return_token_ids": ReturnTokenIdsCallback,
    "opentelemetry": LightningOpenTelemetry,
    "logprobs": LogprobsCallback,
}
DEFAULT_CALLBACKS: tuple[str, ...] = ("return_token_ids", "opentelemetry")

CallbackSpec = Union[str, ProxyCallback]


def resolve_plugins(
    specs: Optional[Sequence[Any]], defaults: Sequence[str], aliases: Mapping[str, type[P]], base: type[P], kind: str
) -> list[P]:
    """Instances of `base` for aliases / instances (None = the defaults); unknown aliases name the known ones."""
    resolved: list[P] = []
    for spec in defaults if specs is None else specs:
        if isinstance(spec, base):
            resolved.append(spec)
        elif isinstance(spec, str) and spec in aliases:
            resolved.append(aliases[spec]())
        else:
            raise ValueError(
                f"unknown LLM proxy {kind} {spec!r}; use one of {sorted(aliases)} or a {base.__name__} instance"
            )
    return resolved


def resolve_callbacks(specs: Optional[Sequence[CallbackSpec]]) -> list[ProxyCallback]:
    """Instances for aliases / instances (None = the defaults); unknown aliases name the known ones."""
    return resolve_plugins(specs, DEFAULT_CALLBACKS, CALLBACK_ALIASES, ProxyCallback, "callback")
