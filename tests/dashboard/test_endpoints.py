"""The dashboard's endpoints on a real store server: enriched rollout pages, triplets, reward series, throughput."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from agentlightning.dashboard.analytics import pick_bucket_seconds
from agentlightning.dashboard.routes import STATIC_DIR, dashboard_caches, dashboard_router
from agentlightning.dashboard.summaries import input_preview
from agentlightning.store import InMemoryLightningStore, LightningStoreServer

from .seed import ManualClock, Seeded, seed_store


def _app_of(server: LightningStoreServer) -> FastAPI:
    assert server.app is not None
    return server.app


API = "/v1/agl"
TERMINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture
async def seeded_server() -> AsyncIterator[tuple[LightningStoreServer, Seeded]]:
    clock = ManualClock(1_700_000_000.0)
    store = InMemoryLightningStore(clock=clock, scan_debounce_seconds=0)
    seeded = await seed_store(store, clock, n_train=8, n_val=4)
    server = LightningStoreServer(store, port=0, routers=[dashboard_router()])
    await server.start()
    yield server, seeded
    await server.stop()
    await store.close()


@pytest.fixture
async def http(seeded_server: tuple[LightningStoreServer, Seeded]) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=seeded_server[0].endpoint, timeout=30) as client:
        yield client


@pytest.fixture
def seeded(seeded_server: tuple[LightningStoreServer, Seeded]) -> Seeded:
    return seeded_server[1]


async def get_ok(http: httpx.AsyncClient, path: str, **params: Any) -> Any:
    response = await http.get(API + path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def all_rows(http: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    page = await get_ok(http, "/dashboard/rollouts", limit=100, **params)
    assert page["total"] == len(page["items"])
    return page["items"]


# ---- info and overview ----


async def test_info_answers_with_server_time_and_version(http: httpx.AsyncClient) -> None:
    info = await get_ok(http, "/dashboard/info")
    assert info["status"] == "ok" and info["version"] and info["store"] == "InMemoryLightningStore"
    assert isinstance(info["server_time"], float)


async def test_overview_counts_rollouts_and_workers_by_status(http: httpx.AsyncClient, seeded: Seeded) -> None:
    overview = await get_ok(http, "/dashboard/overview")
    expected = {status: len(ids) for status, ids in seeded.rollout_ids.items()}
    assert {k: v for k, v in overview["rollouts_by_status"].items() if v} == expected
    assert overview["workers_by_status"] == {"idle": 2, "busy": 1, "unknown": 1}
    assert overview["statistics"]["total_rollouts"] == seeded.total


# ---- rollout rows ----


async def test_rollout_rows_carry_attempts_duration_and_final_reward(http: httpx.AsyncClient, seeded: Seeded) -> None:
    rows = {row["rollout_id"]: row for row in await all_rows(http)}
    assert len(rows) == seeded.total
    for rollout_id, reward in seeded.rewards.items():
        assert rows[rollout_id]["final_reward"] == pytest.approx(reward)
    for rollout_id in seeded.rollout_ids["failed"]:
        assert rows[rollout_id]["final_reward"] is None
        assert rows[rollout_id]["error"] == "TimeoutError: tool call timed out after 10 s"  # why, in the row
    assert all(rows[rid]["error"] is None for rid in seeded.rollout_ids["succeeded"])

    showcase = rows[seeded.showcase_rollout_id]
    assert showcase["n_attempts"] == 2
    assert showcase["latest_attempt"]["attempt_id"] == seeded.showcase_attempt_ids[1]
    # The showcase was retried: its duration runs from the attempt at hand's start (no queue wait known).
    assert showcase["run_started"] is not None
    assert showcase["duration"] == pytest.approx(showcase["end_time"] - showcase["run_started"])
    assert showcase["duration"] < showcase["end_time"] - showcase["start_time"]

    (running,) = seeded.rollout_ids["running"]
    assert rows[running]["duration"] is None and rows[running]["n_attempts"] == 1
    for queued in seeded.rollout_ids["queuing"]:
        assert rows[queued]["n_attempts"] == 0 and rows[queued]["latest_attempt"] is None
    assert rows[running]["input_preview"] == '{"question": "What is 99 + 1?"}'


async def test_rollout_rows_count_every_status(http: httpx.AsyncClient, seeded: Seeded) -> None:
    page = await get_ok(http, "/dashboard/rollouts", limit=1)
    assert page["status_counts"]["succeeded"] == len(seeded.rollout_ids["succeeded"])
    assert page["status_counts"]["preparing"] == 0
    assert page["total"] == seeded.total and len(page["items"]) == 1


async def test_filter_by_status_mode_and_id(http: httpx.AsyncClient, seeded: Seeded) -> None:
    failed = await all_rows(http, status_in="failed")
    assert {r["rollout_id"] for r in failed} == set(seeded.rollout_ids["failed"])

    vals = await all_rows(http, mode_in="val")
    assert {r["rollout_id"] for r in vals} == {rid for rid, mode in seeded.modes.items() if mode == "val"}

    both = await all_rows(http, status_in=["queuing", "succeeded"], mode_in=["val", "test"])
    expected = {
        rid
        for status in ("queuing", "succeeded")
        for rid in seeded.rollout_ids[status]
        if seeded.modes[rid] in ("val", "test")
    }
    assert {r["rollout_id"] for r in both} == expected

    needle = seeded.showcase_rollout_id[3:9]
    found = await all_rows(http, rollout_id_contains=needle)
    assert seeded.showcase_rollout_id in {r["rollout_id"] for r in found}
    assert all(needle in r["rollout_id"] for r in found)


async def test_filter_by_run_and_the_runs_listed(http: httpx.AsyncClient) -> None:
    tagged = [
        {"input": i, "metadata": {"agl_run": run}} for i, run in enumerate(["a.py 10:00", "b.py 10:01", "a.py 10:00"])
    ]
    response = await http.post(API + "/queues/rollouts/enqueue", json={"rollouts": tagged})
    assert response.status_code == 201, response.text
    ids = [r["rollout_id"] for r in response.json()]
    of_a = await all_rows(http, run_in=["a.py 10:00"])
    assert {r["rollout_id"] for r in of_a} == {ids[0], ids[2]} and {r["run"] for r in of_a} == {"a.py 10:00"}
    both = await all_rows(http, run_in=["a.py 10:00", "b.py 10:01"], mode_in=["train", "val", "test"])
    assert both == []  # enqueued without a mode: run and mode filters combine
    untagged = await all_rows(http, run_in=[""])
    assert ids[0] not in {r["rollout_id"] for r in untagged} and untagged  # the seeded rollouts have no run
    page = await get_ok(http, "/dashboard/rollouts", limit=1)
    assert set(page["runs"]) == {"a.py 10:00", "b.py 10:01"}


@pytest.mark.parametrize("mode_in", [None, "train"])
async def test_pages_cover_every_match_once_in_order(http: httpx.AsyncClient, seeded: Seeded, mode_in: Any) -> None:
    params: dict[str, Any] = {"sort_by": "start_time", "sort_order": "asc", "limit": 4}
    if mode_in:
        params["mode_in"] = mode_in
    seen: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = await get_ok(http, "/dashboard/rollouts", offset=offset, **params)
        assert page["limit"] == 4 and page["offset"] == offset
        seen.extend(page["items"])
        offset += 4
        if offset >= page["total"]:
            break
    expected = [rid for rid, mode in seeded.modes.items() if mode_in is None or mode == mode_in]
    assert sorted(r["rollout_id"] for r in seen) == sorted(expected)
    starts = [r["start_time"] for r in seen]
    assert starts == sorted(starts)


@pytest.mark.parametrize(
    "params, fragment",
    [
        ({"status_in": "done"}, "done"),
        ({"mode_in": "eval"}, "eval"),
        ({"sort_by": "final_reward"}, "final_reward"),
        ({"sort_order": "up"}, "up"),
        ({"limit": -2}, "limit"),
        ({"offset": -1}, "offset"),
    ],
)
async def test_bad_rollout_queries_are_400(http: httpx.AsyncClient, params: dict[str, Any], fragment: str) -> None:
    response = await http.get(f"{API}/dashboard/rollouts", params=params)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["detail"]


async def test_a_zero_limit_is_an_empty_page_with_the_total(http: httpx.AsyncClient) -> None:
    # As the store's query_rollouts(limit=0) in v0.3: no items, but the counts are there.
    page = await get_ok(http, "/dashboard/rollouts", limit=0)
    assert page["items"] == [] and page["limit"] == 0 and page["total"] > 0


async def test_finished_rollouts_rewards_are_read_once(
    http: httpx.AsyncClient, seeded_server: tuple[LightningStoreServer, Seeded]
) -> None:
    server, seeded = seeded_server
    rewards = dashboard_caches(_app_of(server)).rewards
    await all_rows(http)
    after_first = rewards.span_queries
    await all_rows(http)
    # Only rollouts that can still change (running, preparing, requeuing) are read again.
    unfinished_with_attempts = len(seeded.rollout_ids["running"]) + len(seeded.rollout_ids["requeuing"])
    assert rewards.span_queries - after_first == unfinished_with_attempts


# ---- triplets ----


async def test_triplets_of_latest_attempt_with_drop_report(http: httpx.AsyncClient, seeded: Seeded) -> None:
    result = await get_ok(http, f"/rollouts/{seeded.showcase_rollout_id}/triplets")
    assert result["attempt_id"] == seeded.showcase_attempt_ids[1]
    assert result["adapter"] == "TracerTraceToTriplet"
    assert result["final_reward"] == 1.0
    triplets = result["triplets"]
    assert len(triplets) == 2
    assert triplets[0]["prompt"]["token_ids"] == list(range(1000, 1042))
    assert triplets[1]["response"]["token_ids"] == list(range(6000, 6018))
    assert triplets[1]["prompt"]["raw_content"][-1] == {"role": "tool", "content": "80"}
    assert [t["reward"] for t in triplets] == [None, 1.0]
    report = result["report"]
    assert report["n_llm_spans"] == 3 and report["n_triplets"] == 2
    assert report["drop_counts"] == {"inside_reward_span": 1}
    assert report["dropped"][0]["name"] == "openai.chat.completion"
    # Continuity breaks (where trajectory training starts a new row) are counted by cause for the triplet view.
    assert set(report["break_counts"]) == {"chat_template", "retokenization", "other"}
    assert sum(report["break_counts"].values()) == len(report["token_drift"])
    assert all(drift["cause"] in report["break_counts"] for drift in report["token_drift"])


async def test_triplets_of_an_earlier_attempt(http: httpx.AsyncClient, seeded: Seeded) -> None:
    first = seeded.showcase_attempt_ids[0]
    result = await get_ok(http, f"/rollouts/{seeded.showcase_rollout_id}/triplets", attempt_id=first)
    assert result["attempt_id"] == first
    assert result["final_reward"] is None
    assert len(result["triplets"]) == 1 and result["triplets"][0]["reward"] is None


async def test_triplets_of_missing_things_are_404(http: httpx.AsyncClient, seeded: Seeded) -> None:
    unknown = await http.get(f"{API}/rollouts/ro-nope/triplets")
    assert unknown.status_code == 404 and "ro-nope" in unknown.json()["detail"]
    bad_attempt = await http.get(f"{API}/rollouts/{seeded.showcase_rollout_id}/triplets", params={"attempt_id": "at-x"})
    assert bad_attempt.status_code == 404 and "at-x" in bad_attempt.json()["detail"]
    queued = seeded.rollout_ids["queuing"][0]
    not_started = await http.get(f"{API}/rollouts/{queued}/triplets")
    assert not_started.status_code == 404 and "no attempt" in not_started.json()["detail"]


# ---- reward series and throughput ----


async def test_reward_series_lists_finished_rollouts_oldest_first(http: httpx.AsyncClient, seeded: Seeded) -> None:
    series = await get_ok(http, "/analytics/rewards")
    finished = {rid for status in TERMINAL for rid in seeded.rollout_ids.get(status, [])}
    assert series["total"] == len(finished)
    assert {p["rollout_id"] for p in series["items"]} == finished
    ends = [p["end_time"] for p in series["items"]]
    assert ends == sorted(ends)
    for point in series["items"]:
        assert point["final_reward"] == seeded.rewards.get(point["rollout_id"])
    assert {p["resources_id"] for p in series["items"]} == set(seeded.resources_ids)


async def test_reward_series_by_mode_keeps_the_most_recent(http: httpx.AsyncClient, seeded: Seeded) -> None:
    everything = (await get_ok(http, "/analytics/rewards", mode_in="val"))["items"]
    assert everything and all(p["mode"] == "val" for p in everything)
    latest = await get_ok(http, "/analytics/rewards", mode_in="val", limit=2)
    assert latest["total"] == len(everything)
    assert [p["rollout_id"] for p in latest["items"]] == [p["rollout_id"] for p in everything[-2:]]
    assert (await http.get(f"{API}/analytics/rewards", params={"limit": 0})).status_code == 422


async def test_throughput_counts_finished_rollouts_per_bucket(http: httpx.AsyncClient, seeded: Seeded) -> None:
    result = await get_ok(http, "/analytics/throughput", bucket_seconds=60)
    assert result["bucket_seconds"] == 60
    buckets = result["buckets"]
    assert all(b["start"] % 60 == 0 for b in buckets)
    assert [b["start"] for b in buckets] == [buckets[0]["start"] + 60 * i for i in range(len(buckets))]
    for status in TERMINAL:
        assert sum(b[status] for b in buckets) == len(seeded.rollout_ids.get(status, []))
    auto = await get_ok(http, "/analytics/throughput")
    assert len(auto["buckets"]) <= 61 and auto["total"] == result["total"]
    bad = await http.get(f"{API}/analytics/throughput", params={"bucket_seconds": -5})
    assert bad.status_code == 422 and "bucket_seconds" in bad.json()["detail"]


async def test_throughput_of_an_empty_store_has_no_buckets() -> None:
    store = InMemoryLightningStore()
    server = LightningStoreServer(store, port=0, routers=[dashboard_router()])
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.endpoint) as http:
            assert (await get_ok(http, "/analytics/throughput"))["buckets"] == []
            assert (await get_ok(http, "/analytics/rewards")) == {"items": [], "total": 0, "val_rounds": []}
            assert (await get_ok(http, "/dashboard/rollouts"))["items"] == []
    finally:
        await server.stop()


async def test_a_rollout_without_llm_spans_is_flagged_in_its_triplet_report() -> None:
    from agentlightning.emitter import emit_reward
    from agentlightning.types import Span

    store = InMemoryLightningStore()
    attempted = await store.start_rollout(input="q", metadata={"llm_spans": 0, "llm_spans_hint": "no LLM call"})
    reward = Span.from_core_fields(
        emit_reward(1.0, propagate=False),
        rollout_id=attempted.rollout_id,
        attempt_id=attempted.attempt.attempt_id,
        sequence_id=1,
    )
    await store.add_span(reward)
    server = LightningStoreServer(store, port=0, routers=[dashboard_router()])
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.endpoint) as http:
            result = await get_ok(http, f"/rollouts/{attempted.rollout_id}/triplets")
            rollout = await get_ok(http, f"/rollouts/{attempted.rollout_id}")  # what the rollout page reads
    finally:
        await server.stop()
    assert result["triplets"] == [] and result["report"]["drop_counts"] == {"no_llm_spans": 1}
    assert rollout["metadata"]["llm_spans"] == 0


def test_bucket_sizes_are_round() -> None:
    assert pick_bucket_seconds(30) == 1
    assert pick_bucket_seconds(600) == 10
    assert pick_bucket_seconds(3600) == 60
    assert pick_bucket_seconds(86400 * 3) == 7200
    assert pick_bucket_seconds(86400 * 365) % 86400 == 0


def test_input_preview_is_one_short_line() -> None:
    assert input_preview({"q": "a\n  b"}) == '{"q": "a\\n  b"}'
    assert input_preview("x  \n y") == "x y"
    long = input_preview("word " * 100, limit=20)
    assert len(long) == 20 and long.endswith("\u2026")


# ---- pages and auth ----


async def test_pages_are_public_and_the_api_needs_the_token() -> None:
    store = InMemoryLightningStore()
    server = LightningStoreServer(store, port=0, auth_token="s3cret", routers=[dashboard_router()])
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.endpoint) as http:
            page = await http.get("/")
            assert page.status_code == 200 and "<title>Agent Lightning</title>" in page.text
            assert page.headers["cache-control"] == "no-cache"
            script = await http.get("/js/app.js")
            assert script.status_code == 200 and "javascript" in script.headers["content-type"]
            assert (await http.get(f"{API}/dashboard/info")).status_code == 401
            authorized = await http.get(f"{API}/dashboard/info", headers={"Authorization": "Bearer s3cret"})
            assert authorized.status_code == 200
            assert (await http.get("/no-such-file.js")).status_code == 404
    finally:
        await server.stop()


async def test_every_shipped_asset_is_served(http: httpx.AsyncClient) -> None:
    files = [p for p in STATIC_DIR.rglob("*") if p.is_file()]
    assert {"index.html", "app.js", "api.js", "components.js", "dashboard.css"} <= {p.name for p in files}
    for path in files:
        relative = path.relative_to(STATIC_DIR).as_posix()
        response = await http.get("/" + relative)
        assert response.status_code == 200, relative
        assert response.content == path.read_bytes()


def test_importing_the_dashboard_package_does_not_import_fastapi() -> None:
    code = "import sys, agentlightning.dashboard; print('fastapi' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path.cwd())
    assert result.stdout.strip() == "False"


async def test_sqlite_backend_gives_the_same_rows(tmp_path: Path) -> None:
    from agentlightning.store.sqlite import SqliteLightningStore

    clock = ManualClock(1_700_000_000.0)
    store = SqliteLightningStore(tmp_path / "dash.db", clock=clock, scan_debounce_seconds=0)
    seeded = await seed_store(store, clock, n_train=4, n_val=2)
    server = LightningStoreServer(store, port=0, routers=[dashboard_router()])
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.endpoint) as http:
            rows = {r["rollout_id"]: r for r in await all_rows(http)}
            assert len(rows) == seeded.total
            assert {rid: rows[rid]["final_reward"] for rid in seeded.rewards} == seeded.rewards
            assert rows[seeded.showcase_rollout_id]["n_attempts"] == 2
            trains = await all_rows(http, mode_in="train", status_in="succeeded")
            assert {r["rollout_id"] for r in trains} == {
                rid for rid in seeded.rollout_ids["succeeded"] if seeded.modes[rid] == "train"
            }
            triplets = await get_ok(http, f"/rollouts/{seeded.showcase_rollout_id}/triplets")
            assert len(triplets["triplets"]) == 2
    finally:
        await server.stop()
        await store.close()


async def test_training_refreshes_reuse_finished_rollouts(
    http: httpx.AsyncClient, seeded_server: tuple[LightningStoreServer, Seeded]
) -> None:
    server, _ = seeded_server
    caches = dashboard_caches(_app_of(server))
    first = await get_ok(http, "/analytics/rewards")
    await get_ok(http, "/analytics/throughput")
    assert await get_ok(http, "/analytics/rewards") == first
    assert caches.finished.full_loads == 1
    queries = caches.rewards.span_queries
    await get_ok(http, "/analytics/rewards")
    assert caches.rewards.span_queries == queries


async def test_throughput_takes_any_positive_bucket_size() -> None:
    """With one finished rollout, a bucket of 5e-324 s overflowed into a 422 ('cannot convert float infinity')."""
    store = InMemoryLightningStore()
    server = LightningStoreServer(store, port=0, routers=[dashboard_router()])
    await server.start()
    try:
        started = await store.start_rollout(input=1)
        await store.update_attempt(started.rollout_id, "latest", status="succeeded")
        async with httpx.AsyncClient(base_url=server.endpoint) as http:
            for bucket in (5e-324, 1e-9, 1e300):
                result = await get_ok(http, "/analytics/throughput", bucket_seconds=bucket)
                assert result["total"] == 1 and len(result["buckets"]) == 1
    finally:
        await server.stop()


# ---- workers as the page shows them ----


async def test_worker_rows_filter_and_count_by_the_status_shown(http: httpx.AsyncClient) -> None:
    # The seed's clock is long past: every busy or idle worker has been silent for over a minute.
    page = await get_ok(http, "/dashboard/workers")
    assert {w["worker_id"]: w["shown_status"] for w in page["items"]} == {
        "runner-0": "offline",
        "runner-1": "offline",
        "runner-2": "unknown",
        "runner-3": "offline",
    }
    assert page["status_counts"] == {"busy": 0, "idle": 0, "offline": 3, "unknown": 1}
    offline = await get_ok(http, "/dashboard/workers", status_in="offline", limit=2)
    assert offline["total"] == 3 and [w["worker_id"] for w in offline["items"]] == ["runner-0", "runner-1"]
    response = await http.get(API + "/dashboard/workers", params={"status_in": "asleep"})
    assert response.status_code == 400 and "unknown worker status 'asleep'" in response.text
