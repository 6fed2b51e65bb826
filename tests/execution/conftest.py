"""Shared helpers for execution tests: free ports and child-process bookkeeping."""

from __future__ import annotations

import socket

import psutil
import pytest


def pick_free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def free_port() -> int:
    return pick_free_port()


def leftover_children() -> list[psutil.Process]:
    """Child processes still alive, except multiprocessing's resource tracker (started by any earlier spawn)."""
    kids: list[psutil.Process] = []
    for child in psutil.Process().children():
        try:
            if "multiprocessing.resource_tracker" in " ".join(child.cmdline()):
                continue
        except psutil.Error:
            continue
        kids.append(child)
    return kids
