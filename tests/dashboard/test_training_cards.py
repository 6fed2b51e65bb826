"""What the Training page's cards are built from: validation rounds (never pooled) and worker liveness."""

from __future__ import annotations

import time
from typing import Optional

import httpx

from agentlightning.dashboard.analytics import RewardPoint, validation_rounds
from agentlightning.dashboard.workers import OFFLINE_AFTER_SECONDS, is_offline
from agentlightning.store import InMemoryLightningStore, LightningStoreServer
from agentlightning.types.core import Worker

from .seed import ManualClock


def point(
    n: int, mode: str, reward: Optional[float], resources_id: str = "res-1", run: Optional[str] = None
) -> RewardPoint:
    return RewardPoint(
        run=run,
        rollout_id=f"ro-{n}",
        mode=mode,
        status="succeeded",
        resources_id=resources_id,
        start_time=float(n),
        end_time=float(n) + 0.5,
        final_reward=reward,
    )


def test_validations_before_and_after_training_are_separate_rounds() -> None:
    points = [
        point(0, "val", 0.2),
        point(1, "val", 0.0),
        point(2, "train", 0.5),
        point(3, "train", 1.0),
        point(4, "val", 1.0),
        point(5, "val", 0.8),
        point(6, "val", None),
    ]
    rounds = validation_rounds(points)
    assert [(r.count, r.rewarded) for r in rounds] == [(2, 2), (3, 2)]
    assert rounds[0].mean_reward == 0.1 and rounds[1].mean_reward == 0.9
    assert (rounds[1].first_end_time, rounds[1].last_end_time) == (4.5, 6.5)


def test_new_resources_start_a_round_even_without_training_in_between() -> None:
    rounds = validation_rounds([point(0, "val", 0.0, "v1"), point(1, "val", 1.0, "v2"), point(2, "test", 0.3, "v2")])
    assert [(r.resources_id, r.mean_reward) for r in rounds] == [("v1", 0.0), ("v2", 1.0)]
    assert validation_rounds([point(0, "val", None)])[0].mean_reward is None
    assert validation_rounds([point(0, "train", 1.0)]) == []


def test_each_run_has_its_own_validation_rounds() -> None:
    """Two scripts sharing one store: one's training does not split the other's validation round."""
    points = [
        point(0, "val", 0.0, run="a.py"),
        point(1, "train", 1.0, run="b.py"),
        point(2, "val", 1.0, run="a.py"),
        point(3, "val", 0.5, run="b.py"),
    ]
    rounds = validation_rounds(points)
    assert [(r.run, r.count, r.mean_reward) for r in rounds] == [("a.py", 2, 0.5), ("b.py", 1, 0.5)]


def test_a_worker_silent_for_a_minute_is_offline() -> None:
    now = 10_000.0
    assert not is_offline(Worker(worker_id="w", status="idle", last_heartbeat_time=now - 5), now)
    assert is_offline(Worker(worker_id="w", status="idle", last_heartbeat_time=now - OFFLINE_AFTER_SECONDS - 1), now)
    recent_dequeue = Worker(worker_id="w", status="busy", last_heartbeat_time=now - 600, last_dequeue_time=now - 1)
    assert not is_offline(recent_dequeue, now)
    assert not is_offline(Worker(worker_id="w"), now)  # never heard from: stays "unknown"


def _server_with_dashboard(store: InMemoryLightningStore) -> LightningStoreServer:
    try:
        from agentlightning.dashboard import dashboard_router  # type: ignore[attr-defined]
    except ImportError:  # servers that mount the dashboard themselves
        return LightningStoreServer(store, port=0)
    return LightningStoreServer(store, port=0, routers=[dashboard_router()])  # type: ignore[call-arg]


async def _overview(started: float) -> dict[str, object]:
    clock = ManualClock(started)
    store = InMemoryLightningStore(clock=clock, scan_debounce_seconds=0)
    busy = await store.start_rollout(input=1, worker_id="runner-0")
    done = await store.start_rollout(input=2, worker_id="runner-1")
    await store.update_attempt(done.rollout_id, done.attempt.attempt_id, status="succeeded")
    assert busy.attempt.worker_id == "runner-0"
    server = _server_with_dashboard(store)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.endpoint, timeout=30) as http:
            response = await http.get("/v1/agl/dashboard/overview")
            assert response.status_code == 200, response.text
            return response.json()
    finally:
        await server.stop()
        await store.close()


async def test_overview_counts_live_and_offline_workers() -> None:
    fresh = await _overview(time.time())
    assert fresh["workers_by_status"] == {"busy": 1, "idle": 1, "unknown": 0}
    assert fresh["live_workers_by_status"] == {"busy": 1, "idle": 1}
    assert fresh["workers_offline"] == 0
    ended = await _overview(time.time() - 10 * OFFLINE_AFTER_SECONDS)  # the run ended ten minutes ago
    assert ended["workers_by_status"] == {"busy": 1, "idle": 1, "unknown": 0}
    assert ended["live_workers_by_status"] == {"busy": 0, "idle": 0}
    assert ended["workers_offline"] == 2
