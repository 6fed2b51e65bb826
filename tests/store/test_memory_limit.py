"""The memory a process may use: its cgroup limit (v1 or v2, at any ancestor) when below the host's RAM.

Fake cgroup trees in a temporary directory stand for /sys/fs/cgroup and /proc/self/cgroup.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentlightning.store import memory_limit
from agentlightning.store.memory_limit import cgroup_memory_limit, memory_limit_bytes

GIB = 1024**3
V1_UNLIMITED = "9223372036854771712"


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def host_of_64_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_limit, "host_memory_bytes", lambda: 64 * GIB)


def test_cgroup_v2_limit_of_the_process_or_an_ancestor(tmp_path: Path, host_of_64_gib: None) -> None:
    proc = tmp_path / "proc-cgroup"
    proc.write_text("0::/kubepods/pod1/app\n")
    root = tmp_path / "cgroup"
    _write(root, "kubepods/pod1/app/memory.max", "max\n")
    _write(root, "kubepods/pod1/memory.max", str(2 * GIB))
    _write(root, "memory.max", "max")
    assert cgroup_memory_limit(proc, root) == 2 * GIB
    assert memory_limit_bytes(proc, root) == 2 * GIB


def test_cgroup_v2_as_a_container_sees_it(tmp_path: Path, host_of_64_gib: None) -> None:
    proc = tmp_path / "proc-cgroup"
    proc.write_text("0::/\n")
    root = tmp_path / "cgroup"
    _write(root, "memory.max", str(3 * GIB))
    assert memory_limit_bytes(proc, root) == 3 * GIB


def test_cgroup_v1_memory_controller(tmp_path: Path, host_of_64_gib: None) -> None:
    proc = tmp_path / "proc-cgroup"
    proc.write_text("12:pids:/docker/abc\n4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n")
    root = tmp_path / "cgroup"
    _write(root, "memory/memory.limit_in_bytes", str(512 * 1024**2))  # a container's view of its own cgroup
    assert memory_limit_bytes(proc, root) == 512 * 1024**2
    _write(root, "memory/memory.limit_in_bytes", V1_UNLIMITED)
    _write(root, "memory/docker/abc/memory.limit_in_bytes", str(GIB))
    assert memory_limit_bytes(proc, root) == GIB


def test_no_limit_or_no_cgroups_means_the_hosts_ram(tmp_path: Path, host_of_64_gib: None) -> None:
    proc = tmp_path / "proc-cgroup"
    proc.write_text("4:memory:/\n0::/\n")
    root = tmp_path / "cgroup"
    _write(root, "memory/memory.limit_in_bytes", V1_UNLIMITED)
    _write(root, "memory.max", "max")
    assert memory_limit_bytes(proc, root) == 64 * GIB
    assert memory_limit_bytes(tmp_path / "missing", tmp_path / "nowhere") == 64 * GIB


async def test_the_in_memory_store_budget_follows_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlightning.store import memory

    monkeypatch.setattr(memory, "memory_limit_bytes", lambda: 10 * GIB)
    stats = dict(await memory.InMemoryLightningStore().statistics())
    assert stats["memory_capacity_bytes"] == 10 * GIB
    assert stats["eviction_threshold_bytes"] == int(10 * GIB * 0.7)
