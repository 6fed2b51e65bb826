"""The token ledger: every generated token is trained, discarded for a reason, or in flight, and each step's
counts close: generated == trained + discarded + (in_flight_end - in_flight_start)."""

from __future__ import annotations

import logging
from typing import Any, List, Optional, Sequence, Tuple

import pytest

from agentlightning.adapter import TracerTraceToTriplet
from agentlightning.algorithm.grpo.outcomes import rollout_outcome, rollout_tokens, timeout_location_of
from agentlightning.algorithm.grpo.tokens import (
    DISCARD_REASONS,
    TokenAccountingError,
    TokenLedger,
    response_tokens,
    token_metric_keys,
)
from agentlightning.semconv import AGL_TIMEOUT_LOCATION
from agentlightning.store.memory import InMemoryLightningStore
from agentlightning.types import Attempt, Attributes, RolloutConfig, Span, Triplet
from tests.adapter.span_factory import SpanFactory


def test_a_step_closes_over_trained_discarded_and_the_change_in_flight() -> None:
    ledger = TokenLedger(strict=True)
    for rollout_id in ("a", "b", "c"):
        ledger.track(rollout_id)
    ledger.observe("c", 7)  # still running at the step's end
    ledger.settle("a", 10)
    ledger.train(8)
    ledger.discard("truncated", 2)
    ledger.discard("failed", ledger.settle("b", 5))
    first = ledger.close(1)
    assert (first.generated, first.trained, first.in_flight_start, first.in_flight_end) == (22, 8, 0, 7)
    assert first.discarded == {"truncated": 2, "failed": 5} and first.closes

    ledger.settle("c", 9)  # 2 more tokens this step, all 9 trained: 7 of them came in flight
    ledger.train(9)
    second = ledger.close(2)
    assert (second.generated, second.trained, second.in_flight_start, second.in_flight_end) == (2, 9, 7, 0)
    assert second.closes and second.unaccounted == 0


def test_metrics_name_every_reason_and_the_gap() -> None:
    ledger = TokenLedger()
    ledger.discard("eval", ledger.settle("v", 4))
    metrics = ledger.close(0).as_metrics()
    assert sorted(metrics) == sorted(token_metric_keys())
    assert metrics["tokens/generated"] == 4 and metrics["tokens/discarded/eval"] == 4
    assert metrics["tokens/discarded"] == 4 and metrics["tokens/unaccounted"] == 0
    assert all(f"tokens/discarded/{reason}" in metrics for reason in DISCARD_REASONS)


def test_a_gap_is_logged_or_raised_in_strict_mode(caplog: pytest.LogCaptureFixture) -> None:
    lenient = TokenLedger()
    lenient.settle("a", 10)
    lenient.train(7)  # 3 tokens went nowhere
    with caplog.at_level(logging.ERROR, logger="agentlightning.algorithm.grpo.tokens"):
        counts = lenient.close(3, "GRPO")
    assert counts.unaccounted == 3 and not counts.closes
    assert "GRPO step 3: token accounting does not close" in caplog.text and "3 tokens unaccounted" in caplog.text

    strict = TokenLedger(strict=True)
    strict.settle("a", 10)
    strict.train(10)
    strict.discard("tied", 1)  # counted twice
    with pytest.raises(TokenAccountingError, match="-1 tokens unaccounted"):
        strict.close(1)


def test_tokens_an_abandoned_rollout_records_later_are_discarded_for_its_reason() -> None:
    ledger = TokenLedger(strict=True)
    ledger.track("slow")
    ledger.observe("slow", 3)
    ledger.close(1)  # 3 in flight
    ledger.abandon("slow", 5, "timeout")
    second = ledger.close(2)
    assert (second.generated, second.discarded, second.in_flight_end) == (2, {"timeout": 5}, 0)
    ledger.observe("slow", 9)  # its runner went on generating
    third = ledger.close(3)
    assert (third.generated, third.discarded) == (4, {"timeout": 4}) and third.closes
    ledger.forget("slow")
    ledger.observe("slow", 12)
    assert ledger.close(4).generated == 0


def test_settling_twice_or_an_unknown_reason_does_not_go_unnoticed() -> None:
    ledger = TokenLedger(strict=True)
    ledger.train(ledger.settle("a", 4))
    ledger.settle("a", 4)  # the second settle takes tokens out of nothing
    ledger.train(4)
    with pytest.raises(TokenAccountingError):
        ledger.close(1)
    with pytest.raises(ValueError, match="unknown discard reason 'bored'"):
        ledger.discard("bored", 1)


def test_response_tokens_count_the_calls_with_token_ids() -> None:
    with_ids = Triplet(prompt={"token_ids": [1, 2]}, response={"token_ids": [3, 4, 5]}, reward=None)
    without = Triplet(prompt={"text": "hi"}, response={"text": "there"}, reward=None)
    assert response_tokens([with_ids, without, with_ids]) == 6


def _span(attributes: Attributes) -> Span:
    return Span.from_attributes(
        attributes=attributes, rollout_id="ro-1", attempt_id="at-1", sequence_id=1, name="openai.chat.completion"
    )


def test_a_timeout_is_read_from_the_attempt_status_or_a_span() -> None:
    timed_out = Attempt(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, start_time=0.0, status="timeout")
    failed = Attempt(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, start_time=0.0, status="failed")
    assert timeout_location_of([], timed_out) == "rollout"
    assert timeout_location_of([_span({AGL_TIMEOUT_LOCATION: "llm_call"})], failed) == "llm_call"
    assert timeout_location_of([_span({"gen_ai.request.model": "m"})], failed) is None


async def test_a_retried_rollout_counts_its_failed_attempt_apart_from_the_latest_one() -> None:
    store = InMemoryLightningStore()
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    rollout = await store.enqueue_rollout(input={"q": 1}, config=config)
    hi = [{"role": "user", "content": "hi"}]
    for status, response_ids in (("failed", [3, 4, 5]), ("succeeded", [6, 7])):
        claimed = await store.dequeue_rollout()
        assert claimed is not None
        spans = SpanFactory(rollout.rollout_id, claimed.attempt.attempt_id)
        await store.add_many_spans([spans.openai_call(hi, prompt_ids=[1, 2], response_ids=response_ids)])
        await store.update_attempt(rollout.rollout_id, claimed.attempt.attempt_id, status=status)  # type: ignore[arg-type]
    adapter = TracerTraceToTriplet()

    def adapt(spans: Sequence[Span]) -> Tuple[List[Any], Optional[float]]:
        return list(adapter.adapt(spans)), None

    outcome = await rollout_outcome(store, rollout.rollout_id, adapt)
    assert (outcome.tokens, outcome.earlier, outcome.total_tokens) == (2, {"failed": 3}, 5)
    assert outcome.timeout_location is None and not outcome.attempt_gave_up
    assert await rollout_tokens(store, rollout.rollout_id, adapt) == 5
