"""Every server we ship holds the store's line (`web.hardening`): oversize bodies get an answered 413, web pages
are kept out (a cross-site POST, a rebound Host), and bad input gets a 4xx naming the field.

Before: the LLM proxy took a cross-site `text/plain` POST, `agl serve` answered a foreign `Host` with 200 and
had no body limit, and a body over the proxy's limit reset the connection instead of reading the 413.
Real servers on 127.0.0.1, real httpx clients.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from agentlightning.llm_proxy import LLMProxy
from agentlightning.serving.echo import EchoServer
from agentlightning.web.limits import DEFAULT_MAX_REQUEST_SIZE

CHAT = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
CROSS_SITE = {"Origin": "https://evil.example", "Content-Type": "text/plain"}


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    with EchoServer(max_body_size=1024 * 1024) as server:
        yield server


@pytest.fixture
async def proxy() -> AsyncIterator[LLMProxy]:
    model = {"model_name": "echo", "litellm_params": {"model": "openai/echo", "api_base": "http://127.0.0.1:9/v1"}}
    server = LLMProxy(port=0, model_list=[model], launch_mode="thread")  # type: ignore[list-item]
    await server.start()
    yield server
    await server.stop()


def _chunks(total: int, piece: int = 256 * 1024) -> Iterator[bytes]:
    for _ in range(total // piece):
        yield b"x" * piece


async def test_a_cross_site_text_plain_post_to_the_proxy_is_refused(proxy: LLMProxy) -> None:
    url = f"{proxy.endpoint}/chat/completions"
    answer = httpx.post(url, content=b'{"model": "echo", "messages": []}', headers=CROSS_SITE)
    assert answer.status_code == 403
    assert "evil.example" in answer.json()["error"]["message"]
    rebound = httpx.post(url, json=CHAT, headers={"Host": "evil.example"})
    assert rebound.status_code == 403 and "DNS" in rebound.json()["error"]["message"]


async def test_the_proxy_answers_413_above_32_mib_instead_of_resetting(proxy: LLMProxy) -> None:
    url = f"{proxy.endpoint}/chat/completions"
    size = DEFAULT_MAX_REQUEST_SIZE + 8 * 1024 * 1024
    declared = httpx.post(url, content=b"x" * size, headers={"Content-Type": "application/json"}, timeout=120)
    assert declared.status_code == 413 and str(DEFAULT_MAX_REQUEST_SIZE) in declared.json()["error"]["message"]
    chunked = httpx.post(url, content=_chunks(size), headers={"Content-Type": "application/json"}, timeout=120)
    assert chunked.status_code == 413
    assert httpx.get(f"{proxy.endpoint}/models").status_code == 200, "the proxy still serves"


def test_agl_serve_refuses_a_rebound_host_and_a_foreign_origin(echo: EchoServer) -> None:
    url = f"{echo.endpoint}/chat/completions"
    rebound = httpx.post(url, json=CHAT, headers={"Host": "evil.example:8000"})
    assert rebound.status_code == 403 and "evil.example" in rebound.json()["error"]["message"]
    cross = httpx.post(url, content=b'{"messages": [{"role": "user", "content": "hi"}]}', headers=CROSS_SITE)
    assert cross.status_code == 403
    assert httpx.post(url, json=CHAT, headers={"Host": "localhost"}).status_code == 200, "programs still pass"


def test_agl_serve_answers_413_to_oversize_bodies_declared_or_chunked(echo: EchoServer) -> None:
    for path in ("/chat/completions", "/responses", "/messages"):
        url = f"{echo.endpoint}{path}"
        declared = httpx.post(url, content=b"x" * (8 * 1024 * 1024), headers={"Content-Type": "application/json"})
        assert declared.status_code == 413, path
        assert "agl serve --max-body-size" in declared.json()["error"]["message"]
        chunked = httpx.post(url, content=_chunks(8 * 1024 * 1024), headers={"Content-Type": "application/json"})
        assert chunked.status_code == 413, path
    assert echo.requests_served == 0


def test_agl_serve_names_the_bad_field_of_a_chat_request(echo: EchoServer) -> None:
    answer = httpx.post(f"{echo.endpoint}/chat/completions", json={"messages": [], "n": "many"})
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert "messages" in message and "n:" in message
