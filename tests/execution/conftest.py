"""Shared helpers for execution tests: free ports and child-process bookkeeping."""

from __future__ import annotations

import socket

import pytest


def pick_free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def free_port() -> int:
    return pick_free_port()
