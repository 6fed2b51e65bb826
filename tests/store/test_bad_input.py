"""Bad input is refused with an error naming the bad id / value / field, and nothing is half-written."""

from __future__ import annotations

from typing import Any

import pytest

from agentlightning.store import LightningStore
from agentlightning.types import EnqueueRolloutRequest, PromptTemplate

from .backends import Backend
from .factories import make_span, span_of

UNKNOWN_ROLLOUT = "ro-0123456789ab"
UNKNOWN_ATTEMPT = "at-01234567"


async def assert_empty(store: LightningStore) -> None:
    assert (await store.query_rollouts()).total == 0
    assert await store.dequeue_rollout() is None


# ---- enqueue / start ----


async def test_enqueue_with_invalid_mode_creates_nothing(store: LightningStore, backend: Backend) -> None:
    with pytest.raises(backend.errors, match="bogus"):
        await store.enqueue_rollout(input=1, mode="bogus")  # type: ignore[arg-type]
    await assert_empty(store)


async def test_start_rollout_with_invalid_mode_creates_nothing(store: LightningStore, backend: Backend) -> None:
    with pytest.raises(backend.errors, match="bogus"):
        await store.start_rollout(input=1, mode="bogus")  # type: ignore[arg-type]
    await assert_empty(store)


async def test_an_unknown_resources_id_is_accepted_as_in_v03(store: LightningStore) -> None:
    """v0.3 takes any resources id: the resources may be added under it later (`update_resources`)."""
    queued = await store.enqueue_rollout(input=1, resources_id="rs-later")
    started = await store.start_rollout(input=2, resources_id="rs-later")
    [many] = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=3, resources_id="rs-later")])
    other = await store.enqueue_rollout(input=4)
    moved = await store.update_rollout(other.rollout_id, resources_id="rs-later")
    assert {r.resources_id for r in (queued, started, many, moved)} == {"rs-later"}
    assert await store.get_resources_by_id("rs-later") is None
    await store.update_resources("rs-later", {"prompt": PromptTemplate(template="hi {x}", engine="f-string")})
    update = await store.get_resources_by_id("rs-later")
    assert update is not None and update.resources_id == "rs-later"
    stored = await store.get_rollout_by_id(queued.rollout_id)
    assert stored is not None and stored.resources_id == "rs-later"


async def test_enqueue_many_with_one_bad_request_creates_nothing(store: LightningStore, backend: Backend) -> None:
    requests = [
        EnqueueRolloutRequest(input=1),
        EnqueueRolloutRequest(input=2, resources_id="rs-\x00"),
    ]
    with pytest.raises(backend.errors, match="resources_id"):
        await store.enqueue_many_rollouts(requests)
    await assert_empty(store)


async def test_enqueue_with_malformed_config_creates_nothing(store: LightningStore, backend: Backend) -> None:
    with pytest.raises(backend.errors, match="max_attempts"):
        await store.enqueue_rollout(input=1, config={"max_attempts": 0})  # type: ignore[arg-type]
    await assert_empty(store)


async def test_start_attempt_for_unknown_rollout(store: LightningStore, backend: Backend) -> None:
    with pytest.raises(backend.errors, match=UNKNOWN_ROLLOUT):
        await store.start_attempt(UNKNOWN_ROLLOUT)


# ---- update_rollout / update_attempt ----


async def test_update_unknown_rollout(store: LightningStore, backend: Backend) -> None:
    with pytest.raises(backend.errors, match=UNKNOWN_ROLLOUT):
        await store.update_rollout(UNKNOWN_ROLLOUT, status="succeeded")


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("status", "done", "done"),
        ("mode", "training", "training"),
        ("status", None, "status"),
        ("config", None, "config"),
        ("resources_id", 7, "resources_id"),
    ],
)
async def test_update_rollout_rejects_bad_fields_and_changes_nothing(
    store: LightningStore, backend: Backend, field: str, value: Any, expected: str
) -> None:
    rollout = await store.enqueue_rollout(input=1, metadata={"keep": True})
    kwargs: dict[str, Any] = {field: value, "metadata": {"keep": False}}
    with pytest.raises(backend.errors, match=expected):
        await store.update_rollout(rollout.rollout_id, **kwargs)
    assert await store.get_rollout_by_id(rollout.rollout_id) == rollout


async def test_update_attempt_of_unknown_rollout_or_attempt(store: LightningStore, backend: Backend) -> None:
    started = await store.start_rollout(input=1)
    other = await store.start_rollout(input=2)
    with pytest.raises(backend.errors, match=UNKNOWN_ROLLOUT):
        await store.update_attempt(UNKNOWN_ROLLOUT, "latest", status="running")
    with pytest.raises(backend.errors, match=UNKNOWN_ATTEMPT):
        await store.update_attempt(started.rollout_id, UNKNOWN_ATTEMPT, status="running")
    with pytest.raises(backend.errors, match=other.attempt.attempt_id):
        await store.update_attempt(started.rollout_id, other.attempt.attempt_id, status="running")
    queued = await store.enqueue_rollout(input=3)
    with pytest.raises(backend.errors, match=queued.rollout_id):
        await store.update_attempt(queued.rollout_id, "latest", status="running")


async def test_update_attempt_with_invalid_status_changes_nothing(store: LightningStore, backend: Backend) -> None:
    started = await store.start_rollout(input=1)
    with pytest.raises(backend.errors, match="finished"):
        await store.update_attempt(started.rollout_id, "latest", status="finished", metadata={"x": 1})
    attempt = await store.get_latest_attempt(started.rollout_id)
    assert attempt == started.attempt


# ---- spans ----


async def test_sequence_id_for_unknown_rollout_or_attempt(store: LightningStore, backend: Backend) -> None:
    started = await store.start_rollout(input=1)
    with pytest.raises(backend.errors, match=UNKNOWN_ROLLOUT):
        await store.get_next_span_sequence_id(UNKNOWN_ROLLOUT, started.attempt.attempt_id)
    with pytest.raises(backend.errors, match=UNKNOWN_ROLLOUT):
        await store.get_many_span_sequence_ids(
            [(started.rollout_id, started.attempt.attempt_id), (UNKNOWN_ROLLOUT, "x")]
        )
    # Ids count per rollout, so as in v0.3 any attempt id gets the rollout's next one.
    assert await store.get_next_span_sequence_id(started.rollout_id, UNKNOWN_ATTEMPT) == 1
    assert await store.get_many_span_sequence_ids(
        [(started.rollout_id, UNKNOWN_ATTEMPT), (started.rollout_id, started.attempt.attempt_id)]
    ) == [2, 3]
    assert await store.get_next_span_sequence_id(started.rollout_id, started.attempt.attempt_id) == 4


async def test_span_with_unknown_ids_is_refused(store: LightningStore, backend: Backend) -> None:
    started = await store.start_rollout(input=1)
    with pytest.raises(backend.errors, match=UNKNOWN_ROLLOUT):
        await store.add_span(make_span(UNKNOWN_ROLLOUT, started.attempt.attempt_id, 1))
    with pytest.raises(backend.errors, match=UNKNOWN_ATTEMPT):
        await store.add_many_spans([span_of(started, 1), make_span(started.rollout_id, UNKNOWN_ATTEMPT, 2)])
    assert (await store.query_spans(started.rollout_id)).total == 0


# ---- queries ----


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"limit": -2}, "limit"),
        ({"offset": -1}, "offset"),
        ({"sort_by": "input"}, "input"),
        ({"sort_by": "no_such_field"}, "no_such_field"),
        ({"sort_order": "up"}, "up"),
        ({"filter_logic": "xor"}, "xor"),
        ({"status_in": ["nope"]}, "nope"),
    ],
)
async def test_query_rollouts_rejects_bad_arguments(
    store: LightningStore, backend: Backend, kwargs: dict[str, Any], expected: str
) -> None:
    with pytest.raises(backend.errors, match=expected):
        await store.query_rollouts(**kwargs)


async def test_other_queries_reject_bad_arguments(store: LightningStore, backend: Backend) -> None:
    started = await store.start_rollout(input=1)
    with pytest.raises(backend.errors, match="limit"):
        await store.query_attempts(started.rollout_id, limit=-3)
    with pytest.raises(backend.errors, match="metadata"):
        await store.query_attempts(started.rollout_id, sort_by="metadata")
    with pytest.raises(backend.errors, match="offset"):
        await store.query_spans(started.rollout_id, offset=-5)
    with pytest.raises(backend.errors, match="attributes"):
        await store.query_spans(started.rollout_id, sort_by="attributes")
    with pytest.raises(backend.errors, match="maybe"):
        await store.query_spans(started.rollout_id, filter_logic="maybe")  # type: ignore[arg-type]
    with pytest.raises(backend.errors, match="resources"):
        await store.query_resources(sort_by="resources")
    with pytest.raises(backend.errors, match="sleeping"):
        await store.query_workers(status_in=["sleeping"])  # type: ignore[list-item]
    with pytest.raises(backend.errors, match="heartbeat_stats"):
        await store.query_workers(sort_by="heartbeat_stats")


async def test_wait_with_negative_timeout(store: LightningStore, backend: Backend) -> None:
    with pytest.raises(backend.errors, match="timeout"):
        await store.wait_for_rollouts(rollout_ids=[], timeout=-1)


# ---- resources and workers ----


async def test_malformed_resources_are_refused_and_nothing_is_stored(store: LightningStore, backend: Backend) -> None:
    with pytest.raises(backend.errors, match="not_a_type"):
        await store.add_resources({"x": {"resource_type": "not_a_type"}})  # type: ignore[dict-item]
    with pytest.raises(backend.errors, match="endpoint"):
        await store.update_resources("default", {"llm": {"resource_type": "llm", "model": "m"}})  # type: ignore[dict-item]
    assert await store.get_latest_resources() is None
    assert await store.get_resources_by_id("default") is None
    good = await store.update_resources("default", {"p": PromptTemplate(template="t")})
    with pytest.raises(backend.errors, match="endpoint"):
        await store.update_resources("default", {"llm": {"resource_type": "llm", "model": "m"}})  # type: ignore[dict-item]
    assert await store.get_resources_by_id("default") == good


async def test_worker_ids_and_heartbeat_stats_are_checked(store: LightningStore, backend: Backend) -> None:
    with pytest.raises(backend.errors, match="worker_id"):
        await store.update_worker("")
    with pytest.raises(backend.errors, match="heartbeat_stats"):
        await store.update_worker("w-1", heartbeat_stats="busy")
    assert (await store.query_workers()).total == 0
