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
