"""Store call arguments are checked once for every backend (`agentlightning.store._arguments`)."""

from __future__ import annotations

import pytest

from agentlightning.store import _arguments as arguments
from agentlightning.store.base import UNSET
from agentlightning.types import EnqueueRolloutRequest, RolloutConfig


def test_attempt_changes_keep_only_given_fields() -> None:
    assert arguments.attempt_changes(UNSET, UNSET, UNSET, UNSET) == {}
    assert arguments.attempt_changes("failed", None, 3.5, {"a": 1}) == {
        "status": "failed",
        "worker_id": None,
        "last_heartbeat_time": 3.5,
        "metadata": {"a": 1},
    }


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"status": "done"}, "done"),
        ({"worker_id": 7}, "worker_id"),
        ({"last_heartbeat_time": True}, "last_heartbeat_time"),
        ({"metadata": [1]}, "metadata"),
    ],
)
def test_attempt_changes_name_the_bad_value(kwargs: dict[str, object], match: str) -> None:
    values: dict[str, object] = {"status": UNSET, "worker_id": UNSET, "last_heartbeat_time": UNSET, "metadata": UNSET}
    values.update(kwargs)
    with pytest.raises(ValueError, match=match):
        arguments.attempt_changes(**values)


def test_rollout_changes_copy_what_the_caller_may_still_mutate() -> None:
    metadata = {"nested": {"k": 1}}
    changes = arguments.rollout_changes(UNSET, "train", "cancelled", {"max_attempts": 2}, metadata)
    metadata["nested"]["k"] = 2
    assert changes["metadata"] == {"nested": {"k": 1}}
    assert changes["config"] == RolloutConfig(max_attempts=2)
    assert (changes["mode"], changes["status"]) == ("train", "cancelled")
    with pytest.raises(ValueError, match="config may not be None"):
        arguments.rollout_changes(UNSET, UNSET, UNSET, None, UNSET)


def test_enqueue_drafts_accept_dicts_and_check_every_request_first() -> None:
    drafts = arguments.enqueue_drafts([EnqueueRolloutRequest(input=1), {"input": 2, "mode": "val"}])
    assert [(d.input, d.mode) for d in drafts] == [(1, None), (2, "val")]
    rollout = drafts[1].build("queuing", "rs-1", 5.0)
    assert (rollout.status, rollout.resources_id, rollout.start_time) == ("queuing", "rs-1", 5.0)
    with pytest.raises(ValueError, match="bogus"):
        arguments.enqueue_drafts([EnqueueRolloutRequest(input=1), {"input": 2, "mode": "bogus"}])


def test_query_arguments() -> None:
    arguments.check_query("span", "sequence_id", "desc", 10, 0, "or")
    with pytest.raises(ValueError, match="filter_logic"):
        arguments.check_query("span", None, "asc", -1, 0, "xor")
    with pytest.raises(ValueError, match="cannot sort worker by 'input'"):
        arguments.check_query("worker", "input", "asc", -1, 0)
    statuses, ids = arguments.rollout_query_filters(["queuing"], ["running", "queuing"], None, ["ro-1"])
    assert (statuses, ids) == (["queuing"], ["ro-1"])  # the *_in filter wins over its deprecated alias
    with pytest.raises(ValueError, match="sleeping"):
        arguments.worker_status_filter(["idle", "sleeping"])


def test_worker_and_resources_ids_must_be_non_empty_strings() -> None:
    assert arguments.worker_changes("w-1", {"gpu": 1}) == {"heartbeat_stats": {"gpu": 1}}
    with pytest.raises(ValueError, match="worker_id"):
        arguments.worker_changes("", UNSET)
    with pytest.raises(ValueError, match="heartbeat_stats"):
        arguments.worker_changes("w-1", "busy")
    with pytest.raises(ValueError, match="resources_id"):
        arguments.check_resources_id("")
