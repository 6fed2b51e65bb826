"""Store helpers: `copy_model` behaves as pydantic's `model_copy(update=...)` on the models the store copies."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from agentlightning.store.utils import copy_model
from agentlightning.types import Attempt, Rollout, RolloutConfig, Span, Worker


@pytest.mark.parametrize("changes", [None, {}, {"status": "running", "end_time": 2.0}])
def test_copy_model_matches_model_copy(changes: Optional[dict[str, Any]]) -> None:
    attempt = Attempt(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, start_time=1.0, metadata={"k": 1})
    ours, theirs = copy_model(attempt, changes), attempt.model_copy(update=changes)
    assert type(ours) is Attempt
    assert ours == theirs and repr(ours) == repr(theirs)
    assert ours.model_fields_set == theirs.model_fields_set
    assert ours.model_dump(exclude_unset=True) == theirs.model_dump(exclude_unset=True)
    assert ours.model_dump_json() == theirs.model_dump_json()


def test_copy_model_is_independent_of_its_source() -> None:
    rollout = Rollout(rollout_id="ro-1", input={"q": 1}, start_time=1.0, config=RolloutConfig(max_attempts=2))
    copied = copy_model(rollout, {"status": "preparing"})
    copied.status = "running"
    copied.end_time = 5.0
    assert (rollout.status, rollout.end_time) == ("queuing", None)
    assert "status" not in rollout.model_fields_set
    worker = Worker(worker_id="w")
    busy = copy_model(worker, {"status": "busy"})
    assert (worker.status, busy.status) == ("unknown", "busy")


def test_copy_model_keeps_extra_fields_through_pydantic() -> None:
    span = Span.model_validate(
        {"rollout_id": "ro-1", "attempt_id": "at-1", "sequence_id": 1, "trace_id": "t", "span_id": "s", "name": "n"}
        | {"custom": {"x": 1}}
    )
    copied = copy_model(span, {"sequence_id": 2})
    assert copied.sequence_id == 2 and copied.__pydantic_extra__ == {"custom": {"x": 1}}
    assert copied.__pydantic_extra__ is not span.__pydantic_extra__


# ---- the v0.3 API of store.utils (the reference's internal reference page) ----


async def test_rollout_status_from_attempt_is_a_coroutine_as_in_v03() -> None:
    from agentlightning.store.utils import rollout_status_from_attempt

    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    first = Attempt(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, start_time=1.0, status="failed")
    assert await rollout_status_from_attempt(first, config) == "requeuing"
    last = first.model_copy(update={"sequence_id": 2})
    assert await rollout_status_from_attempt(last, config) == "failed"
    running = first.model_copy(update={"status": "running"})
    assert await rollout_status_from_attempt(running, config) == "running"


async def test_scan_unhealthy_rollouts_takes_running_rollouts_and_returns_verdicts_as_in_v03() -> None:
    import time

    from agentlightning.store.utils import scan_unhealthy_rollouts
    from agentlightning.types import AttemptedRollout

    now = time.time()

    def running(rollout_id: str, started: float, heartbeat: Optional[float]) -> AttemptedRollout:
        attempt = Attempt(
            rollout_id=rollout_id,
            attempt_id=f"at-{rollout_id}",
            sequence_id=1,
            start_time=started,
            status="running",
            last_heartbeat_time=heartbeat,
        )
        config = RolloutConfig(timeout_seconds=100, unresponsive_seconds=10)
        return AttemptedRollout(
            rollout_id=rollout_id, input=1, start_time=started, status="running", config=config, attempt=attempt
        )

    rollouts = [
        running("ro-ok", now - 5, now - 1),
        running("ro-slow", now - 200, now - 1),
        running("ro-silent", now - 50, now - 20),
        running("ro-never", now - 50, None),
    ]
    verdicts = await scan_unhealthy_rollouts(rollouts)
    assert verdicts == {
        ("ro-slow", "at-ro-slow"): "timeout",
        ("ro-silent", "at-ro-silent"): "unresponsive",
        ("ro-never", "at-ro-never"): "unresponsive",
    }


def test_latency_buckets_and_callback_types_are_v03s() -> None:
    from agentlightning.store.utils import LATENCY_BUCKETS, UpdateAttemptStatus, UpdateRolloutStatus

    assert isinstance(LATENCY_BUCKETS, list) and len(LATENCY_BUCKETS) == 44
    assert LATENCY_BUCKETS[0] == 0.000001 and LATENCY_BUCKETS[-1] == 300.0
    assert LATENCY_BUCKETS == sorted(LATENCY_BUCKETS)
    assert UpdateRolloutStatus is not None and UpdateAttemptStatus is not None
