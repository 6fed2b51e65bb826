"""v1.0's rollouts REST on the gateway: bad input is a 4xx naming the field, the routes are in `/openapi.json`,
a create retried with the same `rollout_id` after a restart returns the first rollout, and a schemathesis run
finds no 5xx."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

from agentlightning.gateway import Gateway, GatewayConfig
from agentlightning.store.sqlite import SqliteLightningStore

DEEP = "[" * 100 + "]" * 100
TOO_DEEP_TO_PARSE = "[" * 5000 + "]" * 5000

# (method, path after /api/rollouts, body, status, the field the answer must name)
BAD: list[tuple[str, str, Any, int, str]] = [
    ("GET", "?state_in=queuing&limit=abc", None, 422, "limit"),
    ("GET", "?state_in=queuing&limit=1e99", None, 422, "limit"),
    ("GET", "?state_in=nope", None, 422, "state_in"),
    ("GET", "", None, 422, "state_in"),
    ("GET", "/terminal?after=x", None, 422, "after"),
    ("GET", "/terminal?limit=", None, 422, "limit"),
    ("GET", "/terminal?after=99999999999999999999999", None, 422, "after"),
    ("POST", "", '[{"input": 1, "config": {"timeout_seconds": "abc"}}]', 422, "timeout_seconds"),
    ("POST", "", '[{"input": 1, "config": {"timeout_seconds": null}}]', 422, "timeout_seconds"),
    ("POST", "", '[{"input": 1, "config": {"timeout_seconds": 0}}]', 422, "timeout_seconds"),
    ("POST", "", '[{"input": 1, "config": {"timeout_seconds": true}}]', 422, "timeout_seconds"),
    ("POST", "", '[{"input": 1, "config": {"timeout_seconds": 1e400}}]', 422, "timeout_seconds"),
    ("POST", "", '[{"input": NaN}]', 422, "input"),
    ("POST", "", '[{"input": {"x": [1, -Infinity]}}]', 422, "input"),
    ("POST", "", '[{"input": 1, "metadata": {"score": NaN}}]', 422, "metadata"),
    ("POST", "", '[{"input": 1, "config": {"local": {"env_map": {"A": NaN}}}}]', 422, "local"),
    ("POST", "", f'[{{"input": {DEEP}}}]', 422, "input"),
    ("POST", "", f'[{{"input": {TOO_DEEP_TO_PARSE}}}]', 400, "nests too deeply"),
    ("POST", "", '[{"input": 1, "rollout_id": ""}]', 422, "rollout_id"),
    ("POST", "", '[{"input": 1, "rollout_id": "a\\u0000b"}]', 422, "rollout_id"),
    ("POST", "", '[{"input": 1, "is_train": "yes"}]', 422, "is_train"),
    ("POST", "", '[{"is_train": true}]', 422, "input"),
    ("POST", "", '{"input": 1}', 422, "body"),
    ("POST", "", "{not json", 422, "json_invalid"),
    ("PATCH", "/r-1", '{"status": {"state": "cancelled"}}', 422, "state"),
    ("PATCH", "/r-1", '{"status": {"error_message": 5}}', 422, "error_message"),
    ("PATCH", "/r-1", '{"status": {"state": "running"}, "extra": 1}', 422, "extra"),
]


def admin(gateway: Gateway) -> dict[str, str]:
    return {"Authorization": f"Bearer {gateway.admin_key}", "Content-Type": "application/json"}


async def test_bad_input_is_a_4xx_naming_the_field(make_gateway: Callable[..., Any]) -> None:
    gateway = await make_gateway()
    api = f"{gateway.endpoint}/api/rollouts"
    httpx.post(api, json=[{"input": 1, "rollout_id": "r-1"}], headers=admin(gateway)).raise_for_status()
    for method, path, body, status, field in BAD:
        answer = httpx.request(method, api + path, content=body, headers=admin(gateway))
        case = f"{method} {path} {str(body)[:60]}"
        assert (answer.status_code, field in answer.text) == (status, True), f"{case}: {answer.text[:300]}"
    listed = httpx.get(api, params={"state_in": ["queuing", "running"]}, headers=admin(gateway)).json()
    assert [r["rollout_id"] for r in listed] == ["r-1"], "nothing was created and nothing changed"
    assert listed[0]["status"]["version"] == 1


async def test_without_the_admin_key_bad_input_is_401_first(make_gateway: Callable[..., Any]) -> None:
    gateway = await make_gateway()
    answer = httpx.post(f"{gateway.endpoint}/api/rollouts", content='[{"input": NaN}]')
    assert answer.status_code == 401 and "admin key" in answer.text


async def test_openapi_lists_the_rollout_routes_with_their_models(make_gateway: Callable[..., Any]) -> None:
    gateway = await make_gateway()
    document = httpx.get(f"{gateway.endpoint}/openapi.json").json()
    paths = document["paths"]
    assert set(paths["/api/rollouts"]) == {"get", "post"}
    assert set(paths["/api/rollouts/{rollout_id}"]) == {"get", "patch", "delete"}
    assert "get" in paths["/api/rollouts/terminal"] and "get" in paths["/api/rollouts/{rollout_id}/events"]
    create = paths["/api/rollouts"]["post"]
    assert create["requestBody"]["content"]["application/json"]["schema"]["items"]["$ref"].endswith("RolloutCreate")
    assert create["responses"]["201"]["content"]["application/json"]["schema"]["items"]["$ref"].endswith("V1Rollout")
    schemas = document["components"]["schemas"]
    assert {"RolloutCreate", "V1Config", "RolloutPatch", "StatusPatch", "V1Rollout", "TerminalPage"} <= set(schemas)


async def test_a_create_retried_after_a_restart_returns_the_same_rollout(tmp_path: Path) -> None:
    path = tmp_path / "restart.db"
    first_store = SqliteLightningStore(path)
    first = Gateway(first_store, GatewayConfig(), secret="s")
    await first.start()
    batch = [{"input": {"q": 1}, "rollout_id": "client-7"}, {"input": {"q": 2}, "rollout_id": "client-8"}]
    try:
        made = httpx.post(f"{first.endpoint}/api/rollouts", json=batch, headers=admin(first)).json()
        deleted = httpx.delete(f"{first.endpoint}/api/rollouts/client-8", headers=admin(first))
        assert deleted.status_code == 204
    finally:
        await first.stop()
        await first_store.close()

    store = SqliteLightningStore(path)  # a new process would open the same file
    second = Gateway(store, GatewayConfig(), secret="s")
    await second.start()
    try:
        api = f"{second.endpoint}/api/rollouts"
        again = httpx.post(api, json=[{"input": "retry", "rollout_id": "client-7"}], headers=admin(second))
        assert again.status_code == 201
        assert again.json()[0]["input"] == {"q": 1} and again.json()[0]["status"] == made[0]["status"]
        assert httpx.get(f"{api}/client-7", headers=admin(second)).json()["rollout"]["input"] == {"q": 1}
        recreated = httpx.post(api, json=[{"input": "new", "rollout_id": "client-8"}], headers=admin(second)).json()
        assert recreated[0]["input"] == "new", "a deleted id may be created again"
        stored = list(await store.query_rollouts())
        assert sorted(str(r.input) for r in stored) == ["new", "{'q': 1}", "{'q': 2}"]
    finally:
        await second.stop()
        await store.close()


async def test_concurrent_creates_of_one_id_make_one_rollout(
    make_gateway: Callable[..., Any], store: SqliteLightningStore
) -> None:
    gateway = await make_gateway()
    async with httpx.AsyncClient(timeout=30) as client:
        answers = await asyncio.gather(
            *(
                client.post(
                    f"{gateway.endpoint}/api/rollouts",
                    json=[{"input": i, "rollout_id": "once"}],
                    headers=admin(gateway),
                )
                for i in range(8)
            )
        )
    assert {a.status_code for a in answers} == {201}
    assert len({a.json()[0]["input"] for a in answers}) == 1
    assert len(list(await store.query_rollouts())) == 1


def _schemathesis() -> str:
    executable = shutil.which("schemathesis", path=os.path.dirname(sys.executable)) or shutil.which("schemathesis")
    if executable is None:
        pytest.skip("the schemathesis command is not installed next to this Python")
    return executable


@pytest.mark.slow
async def test_schemathesis_finds_no_server_error(make_gateway: Callable[..., Any], tmp_path: Path) -> None:
    """A bounded, deterministic fuzz of every documented rollout route (valid and invalid data): no 5xx."""
    gateway = await make_gateway()
    command = [
        _schemathesis(),
        "run",
        f"{gateway.endpoint}/openapi.json",
        "--checks",
        "not_a_server_error",
        "--mode",
        "all",
        "--phases",
        "coverage,fuzzing",  # boundary values of every field, then random bodies and parameters
        "--max-examples",
        "3",
        "--generation-deterministic",
        "--header",
        f"Authorization: Bearer {gateway.admin_key}",
        "--include-path-regex",
        "^/api/rollouts",
        "--request-timeout",
        "30",
        "--no-color",
    ]
    run = await asyncio.to_thread(  # in tmp_path: schemathesis keeps a cache (.schemathesis/) in its working directory
        subprocess.run,
        command,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_COLOR": "1"},
        cwd=tmp_path,
    )
    report = run.stdout + run.stderr
    tested = re.search(r"Tested: (\d+)", report)
    assert tested is not None and int(tested.group(1)) >= 7, report[-3000:]
    assert run.returncode == 0 and "No issues found" in report, report[-20000:]
