"""What an attempt leaves in the store: the agent's return value, its exception span and its traced spans.

`RolloutResults` is the part of `LitAgentRunner` that turns what the agent returned (None, a float reward
or a list of spans) into stored spans, records a failure as an `agentlightning.exception` span, lets the
trace's last batch of spans wait to travel with the attempt's final status (when the tracer writes to a
remote store), and flags a rollout that was given an LLM but recorded no LLM call.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar, Union

from opentelemetry.sdk.trace import ReadableSpan

from agentlightning.adapter.llm_call import DEFAULT_LLM_CALL_MATCH, looks_like_llm_call
from agentlightning.emitter import emit_exception, emit_reward
from agentlightning.semconv import AGL_TIMEOUT_LOCATION
from agentlightning.tracer.otel import OtelTracer
from agentlightning.types import (
    AUTO_SEQUENCE_ID,
    LLM,
    AttemptedRollout,
    Hook,
    NamedResources,
    RolloutRawResult,
    Span,
    SpanCoreFields,
    TraceStatus,
)

from .failures import FAILURE_SUMMARY_ATTRIBUTE, describe_failure, timeout_location

if TYPE_CHECKING:
    from agentlightning.litagent import LitAgent
    from agentlightning.store.base import LightningStore
    from agentlightning.tracer.base import Tracer

__all__ = ["RolloutResults", "SpanList", "ZERO_LLM_SPANS_HINT"]

# The runner's messages keep the logger name they had before this module was split off `agent.py`.
logger = logging.getLogger("agentlightning.runner.agent")

T_task = TypeVar("T_task")

SpanList = Union[list[ReadableSpan], list[Span]]


class RolloutResults(Generic[T_task]):
    """Storing an attempt's results; mixed into `LitAgentRunner`, which provides the state below."""

    _tracer: Tracer
    _store: Optional[LightningStore]
    _hooks: list[Hook]
    # The current attempt's last batch of traced spans waits to travel with its final status, and so
    # does its exception span.
    _trace_deferred: bool
    _deferred_spans: list[Span]

    if TYPE_CHECKING:

        def get_agent(self) -> LitAgent[T_task]: ...

        def get_store(self) -> LightningStore: ...

    # ---- the trace's last batch ----

    def _writes_trace_to_remote_store(self) -> bool:
        """Whether our OtelTracer writes its spans to our store, and every store call is an HTTP round trip."""
        tracer, store = self._tracer, self._store
        if not isinstance(tracer, OtelTracer) or store is None or tracer.store is not store:
            return False
        return bool(store.capabilities.get("otlp_traces", False))

    def _defers_last_batch(self) -> bool:
        """Whether the trace's last batch of spans can wait to travel with the attempt's final status.

        Not when an `on_rollout_end` hook is set: hooks run after the rollout's spans were posted.
        """
        if not self._writes_trace_to_remote_store():
            return False
        return all(type(hook).on_rollout_end is Hook.on_rollout_end for hook in self._hooks)

    def _otel_tracer(self) -> OtelTracer:
        tracer = self._tracer
        assert isinstance(tracer, OtelTracer)
        return tracer

    async def _flush_deferred_trace(self) -> None:
        """Write the deferred spans now, so spans the runner stores itself come after them, in order."""
        if self._trace_deferred:
            self._trace_deferred = False
            extra, self._deferred_spans = self._deferred_spans, []
            await self._otel_tracer().flush_last_trace()
            if extra:
                await self.get_store().add_many_spans(extra)

    def _trace_reward(self, reward: float) -> Optional[SpanCoreFields]:
        """Record a returned reward like a final `emit_reward` call, when the tracer writes its spans to our store.

        The reward then travels with the trace's last batch of spans instead of in a request of its own.
        Only worth it when every store call is an HTTP round trip (stores that also take OTLP traces); an
        in-process store takes the reward directly for less than tracing it costs.
        """
        if not self._writes_trace_to_remote_store():
            return None
        core = emit_reward(reward, propagate=False)
        return self._otel_tracer().create_span(core.name, attributes=core.attributes)

    # ---- results ----

    def _coerce_reward(self, result: Any) -> Any:
        if isinstance(result, (bool, int)):
            logger.warning(
                "agent %s returned %s %r as reward; converting it to float (return a float to silence this).",
                type(self.get_agent()).__name__,
                type(result).__name__,
                result,
            )
            return float(result)
        return result

    async def _post_process(
        self,
        rollout: AttemptedRollout,
        result: RolloutRawResult | Any,
        traced_reward: Optional[SpanCoreFields] = None,
    ) -> SpanList:
        """Store what the agent returned and return the rollout's spans (for hooks and logs)."""
        if result is None:
            return list(self._tracer.get_last_trace())
        result = self._coerce_reward(result)
        if isinstance(result, float):
            return await self._store_reward(rollout, result, traced_reward)
        if isinstance(result, list):
            return await self._store_span_list(rollout, result)  # type: ignore[arg-type]
        # The attempt fails with this reason (and an exception span) rather than succeeding without a result.
        raise TypeError(
            f"agent {type(self.get_agent()).__name__} returned a {type(result).__name__}, which is not a "
            "RolloutRawResult: return None (spans come from the tracer), a float reward, or a list of "
            "ReadableSpan / Span / SpanCoreFields"
        )

    async def _store_reward(
        self, rollout: AttemptedRollout, reward: float, traced: Optional[SpanCoreFields]
    ) -> SpanList:
        """The trace plus its reward span, stored now unless the tracer already delivered it (`traced`)."""
        spans: list[Span] = list(self._tracer.get_last_trace())
        if traced is not None and any(_is_span_of(span, traced) for span in reversed(spans)):
            return spans
        # Not captured (e.g. a sampler dropped it): store it ourselves.
        spans.append(await self._store_core_span(rollout, emit_reward(reward, propagate=False)))
        return spans

    async def _store_core_span(self, rollout: AttemptedRollout, core: SpanCoreFields) -> Span:
        """Store one span built by the runner; the store gives it the next sequence id in the same call."""
        span = Span.from_core_fields(
            core, rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id, sequence_id=AUTO_SEQUENCE_ID
        )
        await self._flush_deferred_trace()
        stored = await self.get_store().add_many_spans([span])
        return stored[0] if len(stored) == 1 else span

    async def _store_span_list(self, rollout: AttemptedRollout, items: list[Any]) -> SpanList:
        store = self.get_store()
        rollout_id, attempt_id = rollout.rollout_id, rollout.attempt.attempt_id
        if not items:
            logger.warning("agent returned an empty span list for rollout %s; nothing to store.", rollout_id)
            return list(self._tracer.get_last_trace())
        await self._flush_deferred_trace()
        if all(isinstance(item, ReadableSpan) for item in items):
            self._warn_duplicate_otel_spans(items)
            for item in items:
                await store.add_otel_span(rollout_id, attempt_id, item)
            return list(items)
        if all(isinstance(item, Span) for item in items):
            spans = await self._attribute_spans(rollout, items)
            stored = await store.add_many_spans(spans)
            return list(stored) if len(stored) == len(spans) else spans
        if all(isinstance(item, SpanCoreFields) for item in items):
            sequence_ids = await store.get_many_span_sequence_ids([(rollout_id, attempt_id)] * len(items))
            spans = [
                Span.from_core_fields(core, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=seq)
                for core, seq in zip(items, sequence_ids, strict=True)
            ]
            stored = await store.add_many_spans(spans)
            return list(stored) if len(stored) == len(spans) else spans
        kinds = sorted({type(item).__name__ for item in items})
        raise TypeError(
            f"agent returned a list of {', '.join(kinds)} for rollout {rollout_id}; expected only ReadableSpan, "
            "only Span or only SpanCoreFields"
        )

    async def _attribute_spans(self, rollout: AttemptedRollout, spans: list[Span]) -> list[Span]:
        """Tie returned spans to the running attempt, allocating sequence ids where none were set.

        An agent's span with sequence id 0 (what `Span.from_attributes` leaves) counts as unset too: stored as
        0 it would sort before the attempt's traced spans, and a reward in it would reach no LLM call.
        """
        rollout_id, attempt_id = rollout.rollout_id, rollout.attempt.attempt_id
        foreign = [s for s in spans if s.rollout_id not in ("", rollout_id) or s.attempt_id not in ("", attempt_id)]
        if foreign:
            logger.warning(
                "%d returned span(s) name another rollout/attempt (e.g. %s/%s); storing them under %s/%s.",
                len(foreign),
                foreign[0].rollout_id,
                foreign[0].attempt_id,
                rollout_id,
                attempt_id,
            )
        missing = [i for i, s in enumerate(spans) if s.sequence_id <= 0]
        new_ids = await self.get_store().get_many_span_sequence_ids([(rollout_id, attempt_id)] * len(missing))
        allocated = dict(zip(missing, new_ids, strict=True))
        return [
            span.model_copy(
                update={
                    "rollout_id": rollout_id,
                    "attempt_id": attempt_id,
                    "sequence_id": allocated.get(i, span.sequence_id),
                }
            )
            for i, span in enumerate(spans)
        ]

    def _warn_duplicate_otel_spans(self, items: list[ReadableSpan]) -> None:
        captured = {s.span_id for s in self._tracer.get_last_trace()}
        returned = {format(item.context.span_id, "016x") for item in items if item.context is not None}
        duplicates = captured & returned
        if duplicates:
            logger.warning(
                "%d returned OpenTelemetry span(s) were already captured by %s and are stored twice; return None "
                "instead of the spans when the tracer already records them.",
                len(duplicates),
                type(self._tracer).__name__,
            )

    def _captured_spans(self, rollout: AttemptedRollout) -> list[Span]:
        """What the tracer captured for this attempt (nothing if its trace context never opened)."""
        try:
            trace = self._tracer.get_last_trace()
        except Exception:
            return []
        return [s for s in trace if s.rollout_id == rollout.rollout_id and s.attempt_id == rollout.attempt.attempt_id]

    async def _store_exception(self, rollout: AttemptedRollout, exc: BaseException) -> Optional[Span]:
        """Record the failure as an `agentlightning.exception` span; never raises.

        With the trace's last batch deferred, the span travels with it and the final status (unnumbered
        until then).
        """
        try:
            summary = describe_failure(exc)
            attributes: dict[str, Any] = {FAILURE_SUMMARY_ATTRIBUTE: summary}
            location = timeout_location(exc)
            if location is not None:  # algorithms discard a timed-out rollout, never train on a filled-in reward
                attributes[AGL_TIMEOUT_LOCATION] = location
            core = emit_exception(exc, attributes, propagate=False)
            # emit_exception records a handled exception (status OK); this one failed the attempt.
            core.status = TraceStatus(status_code="ERROR", description=summary)
            if self._trace_deferred:
                span = Span.from_core_fields(
                    core,
                    rollout_id=rollout.rollout_id,
                    attempt_id=rollout.attempt.attempt_id,
                    sequence_id=AUTO_SEQUENCE_ID,
                )
                self._deferred_spans.append(span)
                return span
            return await self._store_core_span(rollout, core)
        except Exception:
            logger.exception("could not store the exception span of rollout %s", rollout.rollout_id)
            return None

    # ---- LLM calls ----

    async def _check_llm_spans(self, rollout: AttemptedRollout, resources: NamedResources, spans: SpanList) -> None:
        """Never a silent zero: a rollout given an LLM that records no LLM call is flagged in its metadata.

        The tracer's spans are checked first; the store is asked only when they hold no LLM call (calls
        through the LLM proxy are stored by the proxy, not traced here). Warns once per agent class.
        """
        llm_names = sorted(name for name, resource in resources.items() if isinstance(resource, LLM))
        if not llm_names or any(isinstance(s, Span) and _is_llm_span(s) for s in spans):
            return
        store = self.get_store()
        rollout_id, attempt_id = rollout.rollout_id, rollout.attempt.attempt_id
        try:
            # The proxy's spans (`openai.chat.completion` / `openai.completion`) are found with a one-row query;
            # the full scan only runs when that finds nothing.
            if len(await store.query_spans(rollout_id, attempt_id, name_contains="completion", limit=1)):
                return
            if any(_is_llm_span(span) for span in await store.query_spans(rollout_id, attempt_id)):
                return
            hint = ZERO_LLM_SPANS_HINT.format(resources=", ".join(repr(n) for n in llm_names))
            agent_name = type(self.get_agent()).__qualname__
            if agent_name not in _warned_zero_llm_agents:
                _warned_zero_llm_agents.add(agent_name)
                logger.warning("agent %s: rollout %s recorded zero LLM spans. %s", agent_name, rollout_id, hint)
            current = await store.get_rollout_by_id(rollout_id)
            metadata = dict((current or rollout).metadata or {})
            metadata.update({"llm_spans": 0, "llm_spans_hint": hint})
            await store.update_rollout(rollout_id, metadata=metadata)
        except Exception:
            logger.exception("could not check the LLM spans of rollout %s", rollout_id)


ZERO_LLM_SPANS_HINT = (
    "It was given LLM resource(s) {resources} but no LLM call was captured. Call the model at the resource's "
    "endpoint (ProxyLLM: llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id)) or through a client "
    "the tracer instruments (openai chat completions / Responses, anthropic, litellm); calls from a subprocess "
    "or a raw HTTP client are not seen by the tracer."
)
"""Reason hint stored as `llm_spans_hint` in the metadata of a rollout with zero LLM spans."""

_warned_zero_llm_agents: set[str] = set()
_LLM_NAME = re.compile(DEFAULT_LLM_CALL_MATCH)


def _is_llm_span(span: Span) -> bool:
    return _LLM_NAME.search(span.name) is not None or looks_like_llm_call(span)


def _is_span_of(span: Span, core: SpanCoreFields) -> bool:
    """Whether `span` is the stored form of the instant span `core` the tracer recorded."""
    return (
        span.name == core.name
        and span.attributes == core.attributes
        and span.start_time is not None
        and core.start_time is not None
        and abs(span.start_time - core.start_time) < 1e-6
    )
