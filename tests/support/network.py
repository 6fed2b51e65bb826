"""Refuse (and record) every connection or DNS lookup that leaves the loopback interface, from any thread."""

from __future__ import annotations

import socket
from typing import Any

import pytest

__all__ = ["LOOPBACK_HOSTS", "block_external_network"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def block_external_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Patch `socket` so non-loopback connects and lookups raise OSError; returns the list of attempts."""
    attempts: list[Any] = []
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex
    original_getaddrinfo = socket.getaddrinfo

    def _allowed(sock: socket.socket, address: Any) -> bool:
        host = address[0] if isinstance(address, tuple) else address
        return sock.family == socket.AF_UNIX or host in LOOPBACK_HOSTS

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        if not _allowed(self, address):
            attempts.append(address)
            raise OSError(f"test forbids network access to {address!r}")
        return original_connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> Any:
        if not _allowed(self, address):
            attempts.append(address)
            raise OSError(f"test forbids network access to {address!r}")
        return original_connect_ex(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in (*LOOPBACK_HOSTS, None):
            attempts.append(host)
            raise OSError(f"test forbids resolving {host!r}")
        return original_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    return attempts
