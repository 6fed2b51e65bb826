"""Web pages cannot use a local store server: cross-site requests and foreign Host names are 403.

A page's `text/plain` POST needs no CORS preflight and DNS rebinding makes a page same-origin with the
server; programs (no `Origin`, an IP or local name in `Host`) and the same-origin dashboard still work.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import APIRouter
from starlette.staticfiles import StaticFiles

from agentlightning.store import InMemoryLightningStore, LightningStoreClient, LightningStoreServer

API = "/v1/agl"


@pytest.fixture
async def inner() -> AsyncIterator[InMemoryLightningStore]:
    store = InMemoryLightningStore()
    yield store
    await store.close()


async def _served(inner: InMemoryLightningStore, **kwargs: Any) -> LightningStoreServer:
    server = LightningStoreServer(inner, host="127.0.0.1", port=0, **kwargs)
    await server.start()
    return server


def _pages(tmp_path: Any) -> APIRouter:
    (tmp_path / "index.html").write_text("<html>dashboard</html>")
    router = APIRouter()
    router.routes.append(_mount(str(tmp_path)))
    return router


def _mount(directory: str) -> Any:
    from starlette.routing import Mount

    return Mount("", app=StaticFiles(directory=directory, html=True))


async def test_a_cross_site_text_plain_post_is_refused_and_changes_nothing(inner: InMemoryLightningStore) -> None:
    server = await _served(inner)
    try:
        async with httpx.AsyncClient(base_url=server.endpoint) as http:
            response = await http.post(
                f"{API}/resources",
                content=b'{"llm": {"resource_type": "llm", "endpoint": "http://evil.example/v1", "model": "m"}}',
                headers={"content-type": "text/plain", "origin": "https://evil.example"},
            )
            assert response.status_code == 403, response.text
            assert "evil.example" in response.json()["detail"] and "--cors-origin" in response.json()["detail"]
            assert response.json()["error_type"] == "ForbiddenOrigin"
            for origin in ("null", "http://127.0.0.1:1", "https://" + server.endpoint.split("//")[1]):
                refused = await http.post(f"{API}/rollouts", json={"input": 1}, headers={"origin": origin})
                assert refused.status_code == 403, origin
            blind_read = await http.get(f"{API}/rollouts", headers={"sec-fetch-site": "cross-site"})
            assert blind_read.status_code == 403
        assert (await inner.query_resources()).total == 0 and (await inner.query_rollouts()).total == 0
    finally:
        await server.stop()


async def test_a_rebound_host_name_is_refused_without_a_token(inner: InMemoryLightningStore) -> None:
    server = await _served(inner, allowed_hosts=["store.lab"])
    port = server.port
    try:
        async with httpx.AsyncClient(base_url=server.endpoint) as http:
            rebound = await http.post(f"{API}/rollouts", json={"input": 1}, headers={"host": f"evil.example:{port}"})
            assert rebound.status_code == 403 and "DNS rebinding" in rebound.json()["detail"]
            assert (await http.get(f"{API}/health", headers={"host": "evil.example"})).status_code == 403
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", "[::1]", "10.1.2.3", "app.localhost", "Store.Lab"):
                ok = await http.get(f"{API}/rollouts", headers={"host": host})
                assert ok.status_code == 200, host
        assert (await inner.query_rollouts()).total == 0
    finally:
        await server.stop()


async def test_with_a_token_any_host_name_works_but_foreign_origins_still_do_not(
    inner: InMemoryLightningStore,
) -> None:
    server = await _served(inner, auth_token="s3cret")
    try:
        async with httpx.AsyncClient(base_url=server.endpoint, headers={"authorization": "Bearer s3cret"}) as http:
            named = await http.get(f"{API}/rollouts", headers={"host": "store.internal.example"})
            assert named.status_code == 200
            refused = await http.post(f"{API}/rollouts", json={"input": 1}, headers={"origin": "https://evil.example"})
            assert refused.status_code == 403
    finally:
        await server.stop()


async def test_programs_the_dashboard_and_allowed_origins_still_work(
    inner: InMemoryLightningStore, tmp_path: Any
) -> None:
    server = await _served(inner, cors_allow_origins=["https://notebook.example"], routers=[_pages(tmp_path)])
    client = LightningStoreClient(server.endpoint, retry_delays=())
    try:
        assert (await client.start_rollout(input=1)).status == "preparing"  # a program: no Origin header
        async with httpx.AsyncClient(base_url=server.endpoint) as http:
            own_origin = server.endpoint
            from_dashboard = await http.post(
                f"{API}/rollouts/search", json={}, headers={"origin": own_origin, "sec-fetch-site": "same-origin"}
            )
            assert from_dashboard.status_code == 200 and from_dashboard.json()["total"] == 1
            allowed = await http.post(f"{API}/rollouts/search", json={}, headers={"origin": "https://notebook.example"})
            assert allowed.status_code == 200
            assert allowed.headers["access-control-allow-origin"] == "https://notebook.example"
            linked = await http.get("/", headers={"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate"})
            assert linked.status_code == 200 and "dashboard" in linked.text  # a link to the dashboard opens it
    finally:
        await client.close()
        await server.stop()


def test_cli_takes_allowed_hosts() -> None:
    from agentlightning.cli.store import build_parser

    args = build_parser().parse_args(["--allowed-host", "store.lab", "--allowed-host", "gpu-7"])
    assert args.allowed_host == ["store.lab", "gpu-7"]
    assert build_parser().parse_args([]).allowed_host == []
