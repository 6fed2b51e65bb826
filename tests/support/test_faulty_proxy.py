"""The fault-injecting proxy forwards faithfully, injects what it is told to, and is reproducible by seed."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from tests.support.faulty_proxy import FaultyProxy


class _Echo(BaseHTTPRequestHandler):
    hits: list[tuple[str, str, bytes]] = []

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _Echo.hits.append((self.command, self.path, body))
        payload = json.dumps({"method": self.command, "path": self.path, "body": body.decode()}).encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Upstream", "echo")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def upstream() -> Iterator[str]:
    _Echo.hits = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _call(url: str, body: bytes | None = None) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read(), dict(error.headers)


def test_a_fault_free_proxy_forwards_method_path_body_status_and_headers(upstream: str) -> None:
    with FaultyProxy(upstream, seed=0, error_rate=0.0, delay_rate=0.0) as proxy:
        status, body, headers = _call(f"{proxy.url}/v1/agl/things?limit=3", b'{"x": 1}')
        assert status == 201
        assert json.loads(body) == {"method": "POST", "path": "/v1/agl/things?limit=3", "body": '{"x": 1}'}
        assert headers["X-Upstream"] == "echo"
        assert proxy.stats.forwarded == 1 and proxy.stats.injected_errors == 0


def test_injected_errors_are_5xx_and_never_reach_the_server(upstream: str) -> None:
    with FaultyProxy(upstream, seed=0, error_rate=1.0, delay_rate=0.0) as proxy:
        statuses = [_call(f"{proxy.url}/v1/agl/rollouts")[0] for _ in range(20)]
        assert all(500 <= s <= 599 for s in statuses)
        assert _Echo.hits == []
        assert proxy.stats.injected_errors == 20 and sum(proxy.stats.errors_by_status.values()) == 20
        # The health probe is spared, so a client can tell a faulty path from a dead server.
        assert _call(f"{proxy.url}/v1/agl/health")[0] == 200


def test_a_lost_response_reaches_the_server_but_answers_502(upstream: str) -> None:
    with FaultyProxy(upstream, seed=0, error_rate=0.0, delay_rate=0.0, lost_response_rate=1.0) as proxy:
        status, _, _ = _call(f"{proxy.url}/v1/agl/rollouts", b"{}")
        assert status == 502
        assert [hit[:2] for hit in _Echo.hits] == [("POST", "/v1/agl/rollouts")]
        assert proxy.stats.lost_responses == 1


def test_a_server_that_is_down_answers_502() -> None:
    with FaultyProxy("http://127.0.0.1:9", seed=0, error_rate=0.0, delay_rate=0.0) as proxy:
        assert _call(f"{proxy.url}/v1/agl/health")[0] == 502
        assert proxy.stats.upstream_down == 1


def test_the_same_seed_draws_the_same_faults(upstream: str) -> None:
    def run(seed: int) -> list[int]:
        with FaultyProxy(upstream, seed=seed, error_rate=0.3, delay_rate=0.2, max_delay=0.01) as proxy:
            return [_call(f"{proxy.url}/v1/agl/x")[0] for _ in range(30)]

    first = run(7)
    assert first == run(7)
    assert any(s >= 500 for s in first) and any(s == 200 for s in first)


def test_rates_are_checked() -> None:
    with pytest.raises(ValueError, match="error_rate"):
        FaultyProxy("http://127.0.0.1:9", seed=0, error_rate=1.5)
    with pytest.raises(ValueError, match="<= 1"):
        FaultyProxy("http://127.0.0.1:9", seed=0, error_rate=0.6, delay_rate=0.6)
