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


_EARLIER_CHILDREN: set[int] = set()


@pytest.fixture(autouse=True)
def _children_before_the_test() -> None:
    """Remember the children alive when a test starts: the worker process runs other test files first, and a
    child one of them left (a library's service process) is not this test's."""
    _EARLIER_CHILDREN.clear()
    _EARLIER_CHILDREN.update(child.pid for child in psutil.Process().children())


def leftover_children() -> list[psutil.Process]:
    """Child processes the current test started that are still alive, except multiprocessing's resource
    tracker (started by any earlier spawn)."""
    kids: list[psutil.Process] = []
    for child in psutil.Process().children():
        if child.pid in _EARLIER_CHILDREN:
            continue
        try:
            if "multiprocessing.resource_tracker" in " ".join(child.cmdline()):
                continue
        except psutil.Error:
            continue
        kids.append(child)
    return kids
