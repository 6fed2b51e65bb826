"""A leaked `AsyncOpenAI` client must not break the next request on the same event loop.

The race behind the APO shared-memory hang: an agent creates an `AsyncOpenAI` per rollout and never closes
it. The server closes the idle keep-alive connection (EOF), so asyncio stops watching its socket; when the
garbage collector then takes the client, the socket's finalizer closes the file descriptor, while openai's
`AsyncHttpxClientWrapper.__del__` schedules `aclose()` on the running loop. The next connection the loop
opens gets the same descriptor number; the scheduled `aclose()` then aborts the old transport, whose
`_remove_reader(fd)` unregisters the *new* connection's reader: the response sits in the socket buffer
and the request waits forever. This test builds exactly that sequence (the server half-closes each connection
right after answering, and the new socket is placed on the freed descriptor number).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import socket
from collections.abc import AsyncIterator

import pytest
from openai import AsyncOpenAI

from agentlightning.instrumentation.openai_clients import install_safe_client_finalizers

_BODY = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    }
).encode()


async def _answer_then_hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer one request as keep-alive, then close the connection from the server side (an idle timeout)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
    )
    await reader.readexactly(length)
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(_BODY), _BODY)
    )
    await writer.drain()
    await asyncio.sleep(0.05)
    # Half-close: the client sees EOF, while this side keeps its descriptor (so the client's is the one freed).
    writer.transport.get_extra_info("socket").shutdown(socket.SHUT_WR)
    _held.append(writer)


_held: list[asyncio.StreamWriter] = []


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    server = await asyncio.start_server(_answer_then_hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for writer in _held:
            writer.close()
        _held.clear()
        server.close()
        await server.wait_closed()


async def _leak_a_client(base_url: str) -> int:
    """Make one request with a client that is never closed; return the socket's descriptor number."""
    client = AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    port = client.base_url.port
    (fd,) = [
        t._sock_fd  # type: ignore[attr-defined]
        for t in gc.get_objects()
        if type(t).__name__ == "_SelectorSocketTransport"
        and getattr(t, "_sock", None) is not None
        and t.get_extra_info("peername", ("", 0))[1] == port
    ]
    del client
    return fd


async def test_a_leaked_client_leaves_the_reused_descriptor_alone(base_url: str) -> None:
    install_safe_client_finalizers()
    old_fd = await _leak_a_client(base_url)
    await asyncio.sleep(0.3)  # the server hangs up; asyncio stops reading the idle socket
    gc.collect()  # the socket's finalizer frees its descriptor; nothing may touch that number afterwards
    host, port = base_url.split("//")[1].split("/")[0].split(":")
    with pytest.raises(OSError):
        os.fstat(old_fd)  # the collected socket closed its descriptor
    # A new connection on the same loop, registered before the loop runs again, under the same number (the
    # kernel hands out the lowest free one; dup2 makes that certain whatever else this process has open).
    sock = socket.create_connection((host, int(port)))
    if sock.fileno() != old_fd:
        os.dup2(sock.fileno(), old_fd)
        sock.close()
        sock = socket.socket(fileno=old_fd)
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    try:
        loop.add_reader(sock.fileno(), readable.set)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
        # Without the fix, the leaked client's scheduled aclose() unregisters this reader: no wake-up ever.
        await asyncio.wait_for(readable.wait(), timeout=10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK")
    finally:
        loop.remove_reader(sock.fileno())
        sock.close()


async def test_requests_keep_working_after_leaked_clients(base_url: str) -> None:
    install_safe_client_finalizers()
    for _ in range(5):
        await _leak_a_client(base_url)
        await asyncio.sleep(0.1)
        gc.collect()
    client = AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    try:
        reply = await asyncio.wait_for(
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}]), timeout=10
        )
    finally:
        await client.close()
    assert reply.choices[0].message.content == "ok"
