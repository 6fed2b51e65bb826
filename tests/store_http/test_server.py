"""LightningStoreServer over a real socket: every REST path, status codes, bad input, auth, pickling."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import pickle
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Request
from starlette.staticfiles import StaticFiles

from agentlightning.store import InMemoryLightningStore, LightningStoreClient, LightningStoreServer
from agentlightning.tracking.metrics import ConsoleMetricsBackend, PrometheusMetricsBackend
from agentlightning.types import LLM, PromptTemplate, Span
from agentlightning.web.launcher import PythonServerLauncher
from tests.store.factories import make_span

API = "/v1/agl"


@pytest.fixture
async def inner() -> AsyncIterator[InMemoryLightningStore]:
    store = InMemoryLightningStore(scan_debounce_seconds=0)
    yield store
    await store.close()


@pytest.fixture
async def server(inner: InMemoryLightningStore) -> AsyncIterator[LightningStoreServer]:
    srv = LightningStoreServer(inner, port=0)
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def http(server: LightningStoreServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.endpoint, timeout=30) as client:
        yield client


async def assert_still_serving(http: httpx.AsyncClient) -> None:
    response = await http.get(f"{API}/health")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


async def started_rollout(http: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await http.post(f"{API}/rollouts", json={"input": {"q": 1}, **body})
    assert response.status_code == 201, response.text
    return response.json()


# ---- every REST path ----


async def test_health(http: httpx.AsyncClient) -> None:
    await assert_still_serving(http)


async def test_enqueue_then_dequeue(http: httpx.AsyncClient) -> None:
    enqueued = await http.post(
        f"{API}/queues/rollouts/enqueue", json={"rollouts": [{"input": 1}, {"input": 2, "mode": "val"}]}
    )
    assert enqueued.status_code == 201
    assert [r["status"] for r in enqueued.json()] == ["queuing", "queuing"]
    assert enqueued.json()[1]["mode"] == "val"

    none_claimed = await http.post(f"{API}/queues/rollouts/dequeue", json={"limit": 0})
    assert none_claimed.status_code == 200 and none_claimed.json() == []
    claimed = await http.post(f"{API}/queues/rollouts/dequeue", json={"limit": 5, "worker_id": "w-1"})
    assert claimed.status_code == 200
    assert [r["input"] for r in claimed.json()] == [1, 2]
    assert all(r["attempt"]["worker_id"] == "w-1" for r in claimed.json())
    empty = await http.post(f"{API}/queues/rollouts/dequeue")  # body is optional
    assert empty.status_code == 200 and empty.json() == []


async def test_rollout_paths(http: httpx.AsyncClient) -> None:
    rollout = await started_rollout(http, mode="train", metadata={"k": "v"})
    rid = rollout["rollout_id"]
    assert rollout["status"] == "preparing" and rollout["attempt"]["sequence_id"] == 1

    got = await http.get(f"{API}/rollouts/{rid}")
    assert got.status_code == 200 and got.json()["attempt"]["attempt_id"] == rollout["attempt"]["attempt_id"]

    listed = await http.get(f"{API}/rollouts", params={"status_in": ["preparing", "running"], "limit": 10})
    assert listed.status_code == 200
    assert listed.json()["total"] == 1 and listed.json()["items"][0]["rollout_id"] == rid
    searched = await http.post(f"{API}/rollouts/search", json={"rollout_id_contains": rid[-4:]})
    assert searched.status_code == 200 and searched.json()["total"] == 1

    updated = await http.post(f"{API}/rollouts/{rid}", json={"status": "cancelled", "metadata": None})
    assert updated.status_code == 200
    assert updated.json()["status"] == "cancelled" and updated.json()["metadata"] is None
    assert updated.json()["end_time"] is not None


async def test_attempt_paths(http: httpx.AsyncClient) -> None:
    rollout = await started_rollout(http, config={"max_attempts": 3})
    rid = rollout["rollout_id"]
    second = await http.post(f"{API}/rollouts/{rid}/attempts", json={"worker_id": "w-2"})
    assert second.status_code == 201 and second.json()["attempt"]["sequence_id"] == 2

    attempts = await http.get(f"{API}/rollouts/{rid}/attempts", params={"sort_order": "desc"})
    assert attempts.status_code == 200
    assert [a["sequence_id"] for a in attempts.json()["items"]] == [2, 1]
    searched = await http.post(f"{API}/rollouts/{rid}/attempts/search", json={"limit": 1, "offset": 1})
    assert [a["sequence_id"] for a in searched.json()["items"]] == [2] and searched.json()["total"] == 2

    latest = await http.get(f"{API}/rollouts/{rid}/attempts/latest")
    assert latest.status_code == 200 and latest.json()["worker_id"] == "w-2"

    aid = latest.json()["attempt_id"]
    updated = await http.post(f"{API}/rollouts/{rid}/attempts/{aid}", json={"status": "succeeded"})
    assert updated.status_code == 200 and updated.json()["status"] == "succeeded"
    cleared = await http.post(f"{API}/rollouts/{rid}/attempts/latest", json={"worker_id": None})
    assert cleared.status_code == 200 and cleared.json()["worker_id"] is None
    assert (await http.get(f"{API}/rollouts/{rid}")).json()["status"] == "succeeded"


async def test_update_attempt_refuses_null_heartbeat_time_and_metadata(http: httpx.AsyncClient) -> None:
    """As in v0.3: these fields take a value or are left out; null is a 400 naming the field."""
    rid = (await started_rollout(http))["rollout_id"]
    for field in ("last_heartbeat_time", "metadata"):
        response = await http.post(f"{API}/rollouts/{rid}/attempts/latest", json={field: None})
        assert response.status_code == 400 and field in response.json()["detail"], response.text


async def test_worker_paths(http: httpx.AsyncClient) -> None:
    beat = await http.post(f"{API}/workers/w-1", json={"heartbeat_stats": {"cpu": 0.5}})
    assert beat.status_code == 200 and beat.json()["heartbeat_stats"] == {"cpu": 0.5}
    assert beat.json()["last_heartbeat_time"] is not None
    bare = await http.post(f"{API}/workers/w-2")
    assert bare.status_code == 200

    listed = await http.get(f"{API}/workers", params={"worker_id_contains": "w-", "sort_by": "worker_id"})
    assert [w["worker_id"] for w in listed.json()["items"]] == ["w-1", "w-2"]
    searched = await http.post(f"{API}/workers/search", json={"worker_id_contains": "2"})
    assert [w["worker_id"] for w in searched.json()["items"]] == ["w-2"]
    got = await http.get(f"{API}/workers/w-1")
    assert got.status_code == 200 and got.json()["worker_id"] == "w-1"


async def test_statistics(http: httpx.AsyncClient) -> None:
    await started_rollout(http)
    stats = await http.get(f"{API}/statistics")
    assert stats.status_code == 200
    assert stats.json()["total_rollouts"] == 1 and stats.json()["total_attempts"] == 1


async def test_resource_paths(http: httpx.AsyncClient) -> None:
    assert (await http.get(f"{API}/resources/latest")).status_code == 404
    llm = LLM(endpoint="http://llm", model="m").model_dump()
    added = await http.post(f"{API}/resources", json={"llm": llm})
    assert added.status_code == 201 and added.json()["version"] == 1
    rs_id = added.json()["resources_id"]

    upserted = await http.post(f"{API}/resources/default", json={"p": PromptTemplate(template="t").model_dump()})
    assert upserted.status_code == 200 and upserted.json()["version"] == 1
    bumped = await http.post(f"{API}/resources/default", json={"p": PromptTemplate(template="u").model_dump()})
    assert bumped.json()["version"] == 2

    latest = await http.get(f"{API}/resources/latest")
    assert latest.status_code == 200 and latest.json()["resources_id"] == "default"
    got = await http.get(f"{API}/resources/{rs_id}")
    assert got.status_code == 200 and got.json()["resources"]["llm"]["endpoint"] == "http://llm"
    listed = await http.get(f"{API}/resources", params={"sort_by": "resources_id"})
    assert listed.status_code == 200
    assert sorted(r["resources_id"] for r in listed.json()["items"]) == sorted([rs_id, "default"])


async def test_span_paths(http: httpx.AsyncClient) -> None:
    rollout = await started_rollout(http)
    rid, aid = rollout["rollout_id"], rollout["attempt"]["attempt_id"]
    nxt = await http.post(f"{API}/spans/next", json={"rollout_id": rid, "attempt_id": aid})
    assert nxt.status_code == 200 and nxt.json() == {"sequence_id": 1}
    many_ids = await http.post(f"{API}/spans/next/many", json={"rollout_attempt_ids": [[rid, aid], [rid, aid]]})
    assert many_ids.status_code == 200 and many_ids.json() == {"sequence_ids": [2, 3]}

    span = make_span(rid, aid, 1, name="first")
    added = await http.post(f"{API}/spans", content=span.model_dump_json())
    assert added.status_code == 201 and added.json()["span_id"] == span.span_id
    batch = [make_span(rid, aid, 2, name="second"), make_span(rid, aid, 3, name="third")]
    added_many = await http.post(f"{API}/spans/many", content="[" + ",".join(s.model_dump_json() for s in batch) + "]")
    assert added_many.status_code == 201 and len(added_many.json()) == 2

    listed = await http.get(f"{API}/spans", params={"rollout_id": rid, "attempt_id": "latest"})
    assert listed.status_code == 200
    assert [s["name"] for s in listed.json()["items"]] == ["first", "second", "third"]
    searched = await http.post(f"{API}/spans/search", json={"rollout_id": rid, "name_contains": "ir"})
    assert [s["name"] for s in searched.json()["items"]] == ["first", "third"]
    assert (await http.get(f"{API}/rollouts/{rid}")).json()["status"] == "running"


async def test_wait_path_returns_finished_rollouts(http: httpx.AsyncClient) -> None:
    done = await started_rollout(http)
    pending = await started_rollout(http)
    await http.post(f"{API}/rollouts/{done['rollout_id']}", json={"status": "succeeded"})
    waited = await http.post(
        f"{API}/waits/rollouts",
        json={"rollout_ids": [pending["rollout_id"], done["rollout_id"]], "timeout": 0},
    )
    assert waited.status_code == 200
    assert [r["rollout_id"] for r in waited.json()] == [done["rollout_id"]]
    assert waited.headers["x-agl-wait-complete"] == "false"
    # Unknown ids never finish, so they do not hold completion back.
    known_done = await http.post(
        f"{API}/waits/rollouts", json={"rollout_ids": ["ro-unknown", done["rollout_id"]], "timeout": 0}
    )
    assert [r["rollout_id"] for r in known_done.json()] == [done["rollout_id"]]
    assert known_done.headers["x-agl-wait-complete"] == "true"


class LateWaitStore(InMemoryLightningStore):
    """Its wait answers before the rollouts finish, as when they finish right after the wait returned."""

    async def wait_for_rollouts(self, *, rollout_ids: list[str], timeout: Any = None) -> list[Any]:
        return []


async def test_wait_answer_includes_rollouts_that_finished_after_the_store_wait() -> None:
    store = LateWaitStore()
    srv = LightningStoreServer(store, port=0)
    await srv.start()
    try:
        rollout = await srv.start_rollout(input=1)
        await srv.update_rollout(rollout.rollout_id, status="succeeded")
        async with httpx.AsyncClient(base_url=srv.endpoint, timeout=30) as http:
            waited = await http.post(f"{API}/waits/rollouts", json={"rollout_ids": [rollout.rollout_id], "timeout": 0})
    finally:
        await srv.stop()
    assert [r["status"] for r in waited.json()] == ["succeeded"]
    assert waited.headers["x-agl-wait-complete"] == "true"


async def test_wait_long_polls_until_completion(http: httpx.AsyncClient, server: LightningStoreServer) -> None:
    rollout = await started_rollout(http)
    rid = rollout["rollout_id"]
    waiting = asyncio.create_task(http.post(f"{API}/waits/rollouts", json={"rollout_ids": [rid], "timeout": 60}))
    await server.update_attempt(rid, "latest", status="failed")
    waited = await asyncio.wait_for(waiting, timeout=30)
    assert [r["status"] for r in waited.json()] == ["failed"]
    assert waited.headers["x-agl-wait-complete"] == "true"


async def test_stop_answers_pending_long_polls(inner: InMemoryLightningStore) -> None:
    srv = LightningStoreServer(inner, port=0)
    await srv.start()
    rollout = await srv.start_rollout(input=1)
    async with httpx.AsyncClient(base_url=srv.endpoint, timeout=60) as http:
        waiting = asyncio.create_task(
            http.post(f"{API}/waits/rollouts", json={"rollout_ids": [rollout.rollout_id], "timeout": 60})
        )
        while not waiting.done() and not await _server_has_open_request(srv):
            await asyncio.sleep(0.01)
        await srv.stop()
        response = await asyncio.wait_for(waiting, timeout=30)
    assert response.status_code == 200 and response.json() == []


async def _server_has_open_request(srv: LightningStoreServer) -> bool:
    launcher = srv._launcher  # pyright: ignore[reportPrivateUsage]
    assert launcher is not None and launcher._server is not None  # pyright: ignore[reportPrivateUsage]
    return bool(launcher._server.server_state.tasks)  # pyright: ignore[reportPrivateUsage]


async def test_otlp_signals_other_than_traces_and_logs_are_not_implemented(http: httpx.AsyncClient) -> None:
    for path in ("/v1/metrics", "/v1/development/profiles"):
        response = await http.post(path, content=b"", headers={"content-type": "application/x-protobuf"})
        assert response.status_code == 501
        assert "traces" in response.json()["detail"]


# ---- bad input: 4xx with a message, and the server keeps serving ----


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "needle"),
    [
        ("POST", "/rollouts", b"{not json", 400, "malformed JSON"),
        ("POST", "/queues/rollouts/enqueue", b'{"rollouts": "many"}', 422, "rollouts"),
        ("POST", "/queues/rollouts/enqueue", b'{"rollouts": [{"input": 1, "mode": "bogus"}]}', 422, "bogus"),
        ("POST", "/queues/rollouts/dequeue", b'{"limit": "ten"}', 422, "limit"),
        ("POST", "/rollouts/search", b'{"limit": -2}', 400, "limit"),
        ("POST", "/rollouts/search", b'{"offset": -1}', 400, "offset"),
        ("POST", "/rollouts/search", b'{"sort_by": "input"}', 400, "input"),
        ("POST", "/rollouts/search", b'{"filter_logic": "xor"}', 400, "xor"),
        ("POST", "/rollouts/search", b'{"status_in": ["sleeping"]}', 400, "sleeping"),
        ("POST", "/rollouts/search", b'{"unknown_field": 1}', 422, "unknown_field"),
        ("POST", "/spans/search", b"{}", 422, "rollout_id"),
        ("POST", "/spans", b'{"name": "x"}', 422, "rollout_id"),
        ("POST", "/spans", b"", 400, "body required"),
        ("POST", "/resources", b'{"x": {"resource_type": "nope"}}', 422, "nope"),
        ("POST", "/waits/rollouts", b'{"rollout_ids": [], "timeout": -1}', 400, "timeout"),
        ("POST", "/workers/w-1", b'{"heartbeat_stats": null}', 400, "heartbeat_stats"),
        ("POST", "/workers/w-1", b'{"heartbeat_stats": "busy"}', 422, "heartbeat_stats"),
    ],
)
async def test_bad_bodies_get_4xx_with_detail(
    http: httpx.AsyncClient, method: str, path: str, body: bytes, status: int, needle: str
) -> None:
    response = await http.request(method, API + path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    assert needle in response.json()["detail"]
    await assert_still_serving(http)


@pytest.mark.parametrize(
    ("params", "status", "needle"),
    [
        ({"limit": "abc"}, 422, "limit"),
        ({"limit": -2}, 400, "limit"),
        ({"sort_by": "metadata"}, 400, "metadata"),
        ({"sort_order": "sideways"}, 400, "sideways"),
    ],
)
async def test_bad_query_params(http: httpx.AsyncClient, params: dict[str, Any], status: int, needle: str) -> None:
    response = await http.get(f"{API}/rollouts", params=params)
    assert response.status_code == status
    assert needle in response.json()["detail"]
    missing = await http.get(f"{API}/spans")
    assert missing.status_code == 422 and "rollout_id" in missing.json()["detail"]


async def test_explicit_nulls_are_rejected_for_fields_that_cannot_be_null(http: httpx.AsyncClient) -> None:
    rollout = await started_rollout(http)
    rid = rollout["rollout_id"]
    for field in ("status", "config"):
        response = await http.post(f"{API}/rollouts/{rid}", json={field: None})
        assert response.status_code == 400 and field in response.json()["detail"]
    response = await http.post(f"{API}/rollouts/{rid}/attempts/latest", json={"status": None})
    assert response.status_code == 400 and "status" in response.json()["detail"]
    assert (await http.get(f"{API}/rollouts/{rid}")).json()["status"] == "preparing"


async def test_unknown_ids_get_404_with_detail(http: httpx.AsyncClient) -> None:
    rollout = await started_rollout(http)
    rid = rollout["rollout_id"]
    cases = [
        ("GET", "/rollouts/ro-missing", None),
        ("POST", "/rollouts/ro-missing", {"status": "succeeded"}),
        ("POST", "/rollouts/ro-missing/attempts", {}),
        ("GET", "/rollouts/ro-missing/attempts/latest", None),
        ("POST", f"/rollouts/{rid}/attempts/at-missing", {"status": "running"}),
        ("GET", "/resources/rs-missing", None),
        ("POST", "/spans/next", {"rollout_id": "ro-missing", "attempt_id": "at-missing"}),
        ("POST", "/spans", make_span("ro-missing", "at-missing", 1).model_dump()),
    ]
    for method, path, body in cases:
        response = await http.request(method, API + path, json=body)
        assert response.status_code == 404, (path, response.text)
        assert "missing" in response.json()["detail"], path
    await assert_still_serving(http)


async def test_unknown_worker_is_200_null(http: httpx.AsyncClient, inner: InMemoryLightningStore) -> None:
    """As in v0.3: an unknown worker id is not an error; the client reads the null as None."""
    response = await http.get(f"{API}/workers/w-missing")
    assert response.status_code == 200 and response.json() is None
    client = LightningStoreClient(str(http.base_url), retry_delays=(), health_retry_delays=())
    try:
        assert await client.get_worker_by_id("w-missing") is None
        await client.update_worker("w-1")
        worker = await client.get_worker_by_id("w-1")
        assert worker is not None and worker.worker_id == "w-1"
    finally:
        await client.close()


async def test_unexpected_errors_are_500_with_an_error_id_and_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenStatistics(InMemoryLightningStore):
        async def statistics(self) -> Any:
            raise RuntimeError("statistics exploded in /secret/install/path")

    srv = LightningStoreServer(BrokenStatistics(), port=0)
    await srv.start()
    try:
        async with httpx.AsyncClient(base_url=srv.endpoint) as http:
            with caplog.at_level(logging.ERROR, logger="agentlightning.store_http.errors"):
                response = await http.get(f"{API}/statistics")
            assert response.status_code == 500
            payload = response.json()
            assert set(payload) == {"detail", "error_type", "error_id"}
            assert payload["error_type"] == "InternalServerError" and "RuntimeError" in payload["detail"]
            assert payload["error_id"] in payload["detail"]
            assert "/secret/install/path" not in response.text and "Traceback" not in response.text
            logged = [r for r in caplog.records if payload["error_id"] in r.getMessage()]
            assert logged and logged[0].exc_info is not None  # the traceback stays in the server log
            await assert_still_serving(http)
    finally:
        await srv.stop()


# ---- auth ----


async def test_bearer_token_guards_everything_but_health(inner: InMemoryLightningStore) -> None:
    srv = LightningStoreServer(inner, port=0, auth_token="s3cret")
    await srv.start()
    try:
        async with httpx.AsyncClient(base_url=srv.endpoint) as http:
            assert (await http.get(f"{API}/health")).status_code == 200
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
                denied = await http.get(f"{API}/statistics", headers=headers)
                assert denied.status_code == 401
                assert "Bearer" in denied.json()["detail"] and denied.headers["www-authenticate"] == "Bearer"
            assert (await http.post("/v1/traces", content=b"")).status_code == 401
            allowed = await http.get(f"{API}/statistics", headers={"Authorization": "Bearer s3cret"})
            assert allowed.status_code == 200
        client = LightningStoreClient(srv.endpoint, auth_token="s3cret")
        assert (await client.enqueue_rollout(input=1)).status == "queuing"
        await client.close()
    finally:
        await srv.stop()


async def test_token_from_environment(inner: InMemoryLightningStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_STORE_TOKEN", "from-env")
    srv = LightningStoreServer(inner, port=0)
    await srv.start()
    try:
        client = LightningStoreClient(srv.endpoint)  # picks up the same variable
        assert (await client.query_rollouts()).total == 0
        await client.close()
        async with httpx.AsyncClient(base_url=srv.endpoint) as http:
            assert (await http.get(f"{API}/statistics")).status_code == 401
    finally:
        await srv.stop()


async def test_cors_preflight_needs_no_token(inner: InMemoryLightningStore) -> None:
    srv = LightningStoreServer(inner, port=0, cors_allow_origins=["http://ui.local"], auth_token="t")
    await srv.start()
    try:
        async with httpx.AsyncClient(base_url=srv.endpoint) as http:
            preflight = await http.options(
                f"{API}/rollouts",
                headers={"Origin": "http://ui.local", "Access-Control-Request-Method": "GET"},
            )
            assert preflight.status_code == 200
            assert preflight.headers["access-control-allow-origin"] == "http://ui.local"
    finally:
        await srv.stop()


# ---- the server as a store: in-process, from other loops and from other processes ----


async def test_owner_calls_run_on_the_serving_loop(server: LightningStoreServer) -> None:
    rollout = await server.enqueue_rollout(input="x")
    client = LightningStoreClient(server.endpoint)
    try:
        claimed = await client.dequeue_rollout(worker_id="w")
        assert claimed is not None and claimed.rollout_id == rollout.rollout_id
        assert (await server.get_latest_attempt(rollout.rollout_id)) == claimed.attempt

        def from_another_thread() -> int:
            return asyncio.run(server.query_rollouts()).total

        assert await asyncio.to_thread(from_another_thread) == 1
    finally:
        await client.close()
    assert server.capabilities == {"thread_safe": True, "async_safe": True, "zero_copy": True, "otlp_traces": True}
    assert server.otlp_traces_endpoint() == server.endpoint + "/v1/traces"


def _child_enqueues(pickled_server: bytes, result_queue: Any) -> None:
    srv = pickle.loads(pickled_server)

    async def run() -> str:
        rollout = await srv.enqueue_rollout(input="from-child")
        await srv.close()
        return rollout.rollout_id

    result_queue.put(asyncio.run(run()))


async def test_pickled_server_works_from_a_spawned_process(server: LightningStoreServer) -> None:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    process = ctx.Process(target=_child_enqueues, args=(pickle.dumps(server), results))
    process.start()
    rollout_id = await asyncio.to_thread(results.get, True, 120)
    await asyncio.to_thread(process.join, 60)
    assert process.exitcode == 0
    rollout = await server.get_rollout_by_id(rollout_id)
    assert rollout is not None and rollout.input == "from-child"


async def test_unpickled_copy_in_the_same_process_goes_over_http(server: LightningStoreServer) -> None:
    copy = pickle.loads(pickle.dumps(server))
    rollout = await copy.start_rollout(input=7)
    assert (await server.get_rollout_by_id(rollout.rollout_id)) == rollout
    with pytest.raises(RuntimeError, match="only the process that created it"):
        await copy.stop()
    await copy.close()


def test_mp_launch_needs_a_store_shared_across_processes() -> None:
    with pytest.raises(ValueError, match="zero_copy"):
        LightningStoreServer(InMemoryLightningStore(), port=0, launch_mode="mp")


async def test_asyncio_launch_mode(inner: InMemoryLightningStore) -> None:
    srv = LightningStoreServer(inner, port=0, launch_mode="asyncio")
    await srv.start()
    try:
        client = LightningStoreClient(srv.endpoint)
        await client.enqueue_rollout(input=1)
        assert (await srv.query_rollouts()).total == 1
        await client.close()
    finally:
        await srv.stop()
    assert not srv.is_running()


def test_default_port_and_host(caplog: pytest.LogCaptureFixture) -> None:
    srv = LightningStoreServer(InMemoryLightningStore())
    assert srv.endpoint == "http://127.0.0.1:4747"
    assert "4747" in caplog.text


# ---- metrics ----


async def test_http_metrics_per_route_template(inner: InMemoryLightningStore) -> None:
    tracker = ConsoleMetricsBackend(log_interval_seconds=3600)
    srv = LightningStoreServer(inner, port=0, tracker=tracker)
    await srv.start()
    try:
        async with httpx.AsyncClient(base_url=srv.endpoint) as http:
            await http.get(f"{API}/rollouts/ro-a")
            await http.get(f"{API}/rollouts/ro-b")
    finally:
        await srv.stop()
    counters = tracker.snapshot()["counters"]["agl.http.total"]
    assert counters["{method=GET,path=/v1/agl/rollouts/{rollout_id},status=404}"] == 2
    assert "agl.http.latency" in tracker.snapshot()["histograms"]


async def test_prometheus_endpoint(inner: InMemoryLightningStore) -> None:
    from prometheus_client import CollectorRegistry

    srv = LightningStoreServer(inner, port=0, tracker=PrometheusMetricsBackend(registry=CollectorRegistry()))
    await srv.start()
    try:
        async with httpx.AsyncClient(base_url=srv.endpoint, follow_redirects=True) as http:
            await http.get(f"{API}/statistics")
            scraped = await http.get("/v1/prometheus/")
    finally:
        await srv.stop()
    assert scraped.status_code == 200
    assert 'agl_http_total{method="GET",path="/v1/agl/statistics",status="200"} 1.0' in scraped.text


async def test_span_model_roundtrip_keeps_extra_fields(server: LightningStoreServer) -> None:
    rollout = await server.start_rollout(input=1)
    span = Span.model_validate({**make_span(rollout.rollout_id, rollout.attempt.attempt_id, 1).model_dump(), "x": [1]})
    client = LightningStoreClient(server.endpoint)
    try:
        stored = await client.add_span(span)
        assert stored is not None and stored.model_extra == {"x": [1]}
    finally:
        await client.close()


async def test_extra_routers_are_served_and_their_pages_are_public(
    inner: InMemoryLightningStore, tmp_path: Path
) -> None:
    (tmp_path / "index.html").write_text("<h1>pages</h1>")
    extra = APIRouter(prefix=API)

    @extra.get("/extra/count")
    async def count(request: Request) -> dict[str, int]:
        store = request.app.state.agl_store
        return {"rollouts": len(await store.query_rollouts())}

    extra.mount("/", StaticFiles(directory=str(tmp_path), html=True))
    srv = LightningStoreServer(inner, port=0, auth_token="t", routers=[extra])
    await srv.start()
    try:
        async with httpx.AsyncClient(base_url=srv.endpoint) as http:
            page = await http.get("/")
            assert page.status_code == 200 and "pages" in page.text
            assert (await http.get(f"{API}/extra/count")).status_code == 401
            auth = {"Authorization": "Bearer t"}
            assert (await http.get(f"{API}/extra/count", headers=auth)).json() == {"rollouts": 0}
            assert (await http.get(f"{API}/rollouts")).status_code == 401
    finally:
        await srv.stop()


async def test_without_extra_routers_nothing_but_the_api_is_served(inner: InMemoryLightningStore) -> None:
    srv = LightningStoreServer(inner, port=0)
    await srv.start()
    try:
        async with httpx.AsyncClient(base_url=srv.endpoint) as http:
            assert (await http.get("/")).status_code == 404
            assert (await http.get(f"{API}/dashboard/info")).status_code == 404
    finally:
        await srv.stop()


def test_the_store_packages_do_not_import_the_dashboard() -> None:
    code = (
        "import sys; from agentlightning.store import InMemoryLightningStore, LightningStoreServer; "
        "LightningStoreServer(InMemoryLightningStore(), port=0); "
        "assert not [m for m in sys.modules if m.startswith('agentlightning.dashboard')]"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


async def test_server_exposes_its_launcher(inner: InMemoryLightningStore) -> None:
    srv = LightningStoreServer(inner, port=0)
    launcher = srv.server_launcher
    assert isinstance(launcher, PythonServerLauncher)
    await srv.start()
    try:
        assert launcher.is_running() and srv.endpoint == launcher.access_endpoint
    finally:
        await srv.stop()
    assert pickle.loads(pickle.dumps(srv)).server_launcher is None


async def test_mp_launch_with_a_store_shared_across_processes(tmp_path: Path) -> None:
    from agentlightning.store.sqlite import SqliteLightningStore

    sqlite = SqliteLightningStore(tmp_path / "shared.db")
    srv = LightningStoreServer(sqlite, port=0, launch_mode="mp", n_workers=2)
    await srv.start()
    client = LightningStoreClient(srv.endpoint)
    try:
        created = [await client.enqueue_rollout(input=i) for i in range(6)]
        claimed = [await client.dequeue_rollout(worker_id="w") for _ in range(6)]
        assert {c.rollout_id for c in claimed if c is not None} == {r.rollout_id for r in created}
        assert (await srv.query_rollouts(status_in=["preparing"])).total == 6  # the owner reads the same file
    finally:
        await client.close()
        await srv.stop()
        await sqlite.close()


async def test_integers_past_64_bits_are_422_naming_the_field(tmp_path: Path) -> None:
    """SQL backends take 64-bit integers; 2**63 used to reach SQLite and answer 500."""
    from agentlightning.store.sqlite import SqliteLightningStore

    sqlite = SqliteLightningStore(tmp_path / "big.db")
    srv = LightningStoreServer(sqlite, port=0)
    await srv.start()
    huge = 2**63
    try:
        async with httpx.AsyncClient(base_url=srv.endpoint, timeout=30) as http:
            rid = (await started_rollout(http))["rollout_id"]
            cases: list[tuple[str, str, Any, Any, str]] = [
                ("POST", "/queues/rollouts/dequeue", {"limit": huge}, None, "limit"),
                ("POST", "/rollouts/search", {"limit": huge}, None, "limit"),
                ("POST", "/rollouts/search", {"offset": huge}, None, "offset"),
                ("POST", f"/rollouts/{rid}/attempts/search", {"offset": -huge - 1}, None, "offset"),
                ("POST", "/workers/search", {"limit": huge}, None, "limit"),
                ("POST", "/spans/search", {"rollout_id": rid, "offset": huge}, None, "offset"),
                ("GET", "/rollouts", None, {"limit": str(huge)}, "limit"),
                ("GET", f"/rollouts/{rid}/attempts", None, {"offset": str(huge)}, "offset"),
                ("GET", "/workers", None, {"limit": str(huge)}, "limit"),
                ("GET", "/spans", None, {"rollout_id": rid, "offset": str(huge)}, "offset"),
                ("GET", "/resources", None, {"limit": str(huge)}, "limit"),
            ]
            span = make_span(rid, (await http.get(f"{API}/rollouts/{rid}/attempts/latest")).json()["attempt_id"], huge)
            cases += [
                ("POST", "/spans", span.model_dump(), None, "sequence_id"),
                ("POST", "/spans/many", [span.model_dump()], None, "sequence_id"),
            ]
            for method, path, body, params, field in cases:
                response = await http.request(method, API + path, json=body, params=params)
                assert response.status_code == 422, (path, response.text)
                assert field in response.json()["detail"], (path, response.text)
            await assert_still_serving(http)
    finally:
        await srv.stop()
        await sqlite.close()


# ---- request size limit ----


async def test_bodies_over_the_limit_are_413_and_the_server_stays_small(inner: InMemoryLightningStore) -> None:
    srv = LightningStoreServer(inner, port=0, max_body_size=64 * 1024)
    await srv.start()
    try:
        async with httpx.AsyncClient(base_url=srv.endpoint, timeout=30) as http:
            rollout = await started_rollout(http)
            span = make_span(rollout["rollout_id"], rollout["attempt"]["attempt_id"], 1).model_dump()
            span["attributes"] = {"blob": "x" * 200_000}
            declared = await http.post(f"{API}/spans", json=span)
            assert declared.status_code == 413 and "--max-body-size" in declared.json()["detail"]

            async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
                for _ in range(20):
                    yield b" " * 10_000

            streamed = await http.post(f"{API}/spans", content=chunks(), headers={"Content-Type": "application/json"})
            assert streamed.status_code == 413 and "65536 bytes" in streamed.json()["detail"]
            assert (await inner.query_spans(rollout["rollout_id"])).total == 0
            await assert_still_serving(http)
    finally:
        await srv.stop()


async def test_client_splits_span_batches_under_the_server_limit(inner: InMemoryLightningStore) -> None:
    srv = LightningStoreServer(inner, port=0, max_body_size=16 * 1024)
    await srv.start()
    client = LightningStoreClient(srv.endpoint, retry_budget=0, max_body_size=16 * 1024)
    try:
        started = await client.start_rollout(input=1)
        spans = [
            make_span(started.rollout_id, started.attempt.attempt_id, i).model_copy(
                update={"attributes": {"p": "y" * 3000}}
            )
            for i in range(1, 21)
        ]  # ~60 KB in all: four times the limit
        stored = await client.add_many_spans(spans)
        assert [s.sequence_id for s in stored] == list(range(1, 21))
        assert len(await inner.query_spans(started.rollout_id)) == 20
        lone = spans[0].model_copy(update={"span_id": "big", "sequence_id": 99, "attributes": {"p": "z" * 20_000}})
        (kept,) = await client.add_many_spans([lone])  # too large for any request: cut to fit (test_span_fit.py)
        assert kept.attributes["agentlightning.truncated_attributes"] == ["p"]
    finally:
        await client.close()
        await srv.stop()


def test_cli_parses_max_body_size() -> None:
    from agentlightning.cli.store import build_parser

    assert build_parser().parse_args(["--max-body-size", "2MB"]).max_body_size == 2 * 1024 * 1024
    assert build_parser().parse_args(["--max-body-size", "4096"]).max_body_size == 4096
    assert build_parser().parse_args([]).max_body_size == 16 * 1024 * 1024
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--max-body-size", "lots"])


# ---- auth scheme and the OpenAPI pages ----


async def test_bearer_scheme_is_case_insensitive(inner: InMemoryLightningStore) -> None:
    srv = LightningStoreServer(inner, port=0, auth_token="s3cret")
    await srv.start()
    try:
        async with httpx.AsyncClient(base_url=srv.endpoint) as http:
            for scheme in ("Bearer", "bearer", "BEARER"):
                response = await http.get(f"{API}/statistics", headers={"Authorization": f"{scheme} s3cret"})
                assert response.status_code == 200, scheme
            assert (await http.get(f"{API}/statistics", headers={"Authorization": "Basic s3cret"})).status_code == 401
            assert (await http.get(f"{API}/statistics", headers={"Authorization": "bearer wrong"})).status_code == 401
    finally:
        await srv.stop()


@pytest.mark.parametrize("public_docs", [False, True])
async def test_openapi_pages_need_the_token_unless_made_public(
    inner: InMemoryLightningStore, public_docs: bool
) -> None:
    srv = LightningStoreServer(inner, port=0, auth_token="s3cret", public_docs=public_docs)
    await srv.start()
    try:
        async with httpx.AsyncClient(base_url=srv.endpoint) as http:
            for path in ("/openapi.json", "/docs", "/redoc"):
                anonymous = await http.get(path)
                assert anonymous.status_code == (200 if public_docs else 401), path
                authorized = await http.get(path, headers={"Authorization": "Bearer s3cret"})
                assert authorized.status_code == 200, path
    finally:
        await srv.stop()


async def test_openapi_documents_every_post_body_and_the_error_shape(http: httpx.AsyncClient) -> None:
    document = (await http.get("/openapi.json")).json()
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and schemas["ErrorBody"]["required"] == ["detail", "error_type"]
    posts = [(path, ops["post"]) for path, ops in document["paths"].items() if "post" in ops]
    assert len(posts) >= 15
    for path, operation in posts:
        assert "requestBody" in operation, path
        for status in ("400", "401", "413", "422", "500"):
            assert operation["responses"][status]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"
            }, (path, status)
    update = document["paths"]["/v1/agl/rollouts/{rollout_id}/attempts/{attempt_id}"]["post"]
    body_ref = update["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert {"status", "worker_id", "last_heartbeat_time", "metadata"} <= set(schemas[body_ref]["properties"])


def test_numbers_a_backend_cannot_store_are_422_not_500() -> None:
    from agentlightning.store_http.errors import error_from_exception

    status, body = error_from_exception(OverflowError("Python int too large to convert to SQLite INTEGER"))
    assert status == 422 and b"out of range" in body
