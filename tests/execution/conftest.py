"""Shared helpers for execution tests: free ports and child-process bookkeeping."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

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


RAY_OBJECT_STORE_BYTES = 80 * 1024 * 1024


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A real local Ray cluster shared by the Ray tests: a head without CPUs and two 2-CPU worker nodes.

    Stands in for `ray start --head --num-cpus 0` plus `ray start --address HEAD:6379` on two machines.
    Killed nodes are noticed within ~2 s (Ray's default is tens of seconds).
    """
    pytest.importorskip("ray", reason="the ray extra is part of the dev extra; install agentlightning[ray]")
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "object_store_memory": RAY_OBJECT_STORE_BYTES,
            "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
        },
    )
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=2, object_store_memory=RAY_OBJECT_STORE_BYTES)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()
