"""Conformance: NaN and infinity never poison a rollout, on every backend (see docs/store-guarantees.md).

- in span telemetry (attributes, events, links, resource) they are kept as the strings "NaN", "Infinity",
  "-Infinity": the span is stored, the rollout moves on, and every later read works;
- in documents (inputs, metadata, resources) and heartbeat times they are refused with a ValueError naming
  the field, and nothing is stored (over HTTP JSON would have turned them into null silently).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentlightning.store import LightningStore
from agentlightning.types import LLM, EnqueueRolloutRequest, Event, Span

from .backends import Backend
from .factories import span_of

NON_FINITE = {"nan": math.nan, "inf": math.inf, "minus_inf": -math.inf}
ENCODED = {"nan": "NaN", "inf": "Infinity", "minus_inf": "-Infinity"}


def _poisoned(span: Span) -> Span:
    return span.model_copy(
        update={
            "attributes": {**NON_FINITE, "logprobs": [-0.5, -math.inf], "ok": 1.5},
            "events": [Event(name="e", attributes={"score": math.nan})],
            "resource": span.resource.model_copy(update={"attributes": {"budget": math.inf}}),
        }
    )


def _assert_encoded(span: Span) -> None:
    assert {k: span.attributes[k] for k in NON_FINITE} == ENCODED
    assert span.attributes["logprobs"] == ["-0.5", "-Infinity"] and span.attributes["ok"] == 1.5
    assert span.events[0].attributes == {"score": "NaN"}
    assert span.resource.attributes == {"budget": "Infinity"}


async def test_span_telemetry_keeps_non_finite_numbers_as_strings(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    stored = await store.add_span(_poisoned(span_of(started, 1)))
    assert stored is not None
    _assert_encoded(stored)
    batch = await store.add_many_spans([_poisoned(span_of(started, 2)), span_of(started, 3)])
    assert len(batch) == 2
    rollout = await store.get_rollout_by_id(started.rollout_id)
    assert rollout is not None and rollout.status == "running"
    spans = (await store.query_spans(started.rollout_id)).items
    assert [s.sequence_id for s in spans] == [1, 2, 3]  # every later read of the rollout works
    _assert_encoded(spans[0])
    _assert_encoded(spans[1])


async def test_finishing_with_a_non_finite_span_finishes_the_attempt(store: LightningStore) -> None:
    started = await store.start_rollout(input=1)
    finished = await store.finish_attempt(
        started.rollout_id, started.attempt.attempt_id, "succeeded", [_poisoned(span_of(started, 1))]
    )
    assert finished.attempt.status == "succeeded"
    rollout = await store.get_rollout_by_id(started.rollout_id)
    assert rollout is not None and rollout.status == "succeeded"
    _assert_encoded((await store.query_spans(started.rollout_id)).items[0])


async def test_a_non_finite_span_time_is_refused(store: LightningStore, backend: Backend) -> None:
    started = await store.start_rollout(input=1)
    for time_field in ("start_time", "end_time"):
        with pytest.raises(backend.errors, match=time_field):
            await store.add_span(span_of(started, 1).model_copy(update={time_field: math.nan}))
    assert (await store.query_spans(started.rollout_id)).total == 0


async def test_non_finite_inputs_metadata_and_heartbeat_times_are_refused(
    store: LightningStore, backend: Backend
) -> None:
    started = await store.start_rollout(input=1)
    for value in NON_FINITE.values():
        with pytest.raises(backend.errors, match=r"input\['x'\]\[1\]"):
            await store.enqueue_rollout(input={"x": [1.0, value]})
        with pytest.raises(backend.errors, match=r"metadata\['score'\]"):
            await store.start_rollout(input=1, metadata={"score": value})
        with pytest.raises(backend.errors, match="input"):
            await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=1), EnqueueRolloutRequest(input=value)])
        with pytest.raises(backend.errors, match="input"):
            await store.update_rollout(started.rollout_id, input=value)
        with pytest.raises(backend.errors, match=r"metadata\['a'\]\['b'\]"):
            await store.update_rollout(started.rollout_id, metadata={"a": {"b": value}})
        with pytest.raises(backend.errors, match="metadata"):
            await store.update_attempt(started.rollout_id, "latest", metadata={"x": value})
        with pytest.raises(backend.errors, match="last_heartbeat_time"):
            await store.update_attempt(started.rollout_id, "latest", last_heartbeat_time=value)
    assert (await store.query_rollouts()).total == 1  # nothing refused was stored
    rollout = await store.get_rollout_by_id(started.rollout_id)
    assert rollout is not None and rollout.input == 1 and rollout.metadata is None
    attempt = await store.get_latest_attempt(started.rollout_id)
    assert attempt is not None and attempt.last_heartbeat_time is None and attempt.metadata is None


async def test_worker_heartbeat_stats_keep_non_finite_numbers_as_strings(store: LightningStore) -> None:
    worker = await store.update_worker("w-1", heartbeat_stats={"gpu": {"util": math.nan}, "load": [1.0, math.inf]})
    expected: dict[str, Any] = {"gpu": {"util": "NaN"}, "load": ["1.0", "Infinity"]}
    assert worker.heartbeat_stats == expected
    found = await store.get_worker_by_id("w-1")
    assert found is not None and found.heartbeat_stats == expected


async def test_non_finite_resources_are_refused(store: LightningStore, backend: Backend) -> None:
    llm = LLM(endpoint="http://127.0.0.1:1/v1", model="m", sampling_parameters={"temperature": math.inf})
    with pytest.raises(backend.errors, match=r"resources\['llm'\]\['sampling_parameters'\]\['temperature'\]"):
        await store.add_resources({"llm": llm})
    with pytest.raises(backend.errors, match="temperature"):
        await store.update_resources("rs-1", {"llm": llm})
    assert (await store.query_resources()).total == 0
