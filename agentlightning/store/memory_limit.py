"""How much memory this process may use: the host's RAM, or less when a cgroup (a container) limits it.

Sizing a memory budget from the host's RAM inside a container limited to a fraction of it gets the process
killed by the OOM killer long before the budget is reached. Both cgroup versions are read: v2
(`memory.max` in the unified hierarchy) and v1 (`memory.limit_in_bytes` of the memory controller), at the
process's own cgroup and every ancestor (a limit set on a parent applies too), and at the root of the
mount (what a container sees of its own cgroup).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Optional

__all__ = ["memory_limit_bytes", "cgroup_memory_limit", "host_memory_bytes"]

_FALLBACK_HOST_BYTES = 8 * 1024**3


def host_memory_bytes() -> int:
    """Total RAM of the machine (8 GiB when it cannot be read)."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:
        return _FALLBACK_HOST_BYTES


def _read_limit(path: Path) -> Optional[int]:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():  # "max" (v2): no limit
        return None
    return int(text)


def _ancestors(cgroup_path: str) -> Iterator[str]:
    """`/a/b` -> `/a/b`, `/a`, `/`."""
    parts = [part for part in cgroup_path.split("/") if part]
    for end in range(len(parts), -1, -1):
        yield "/" + "/".join(parts[:end])


def _limit_files(proc_cgroup: Path, root: Path) -> Iterator[Path]:
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, cgroup_path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # v2 unified hierarchy
            base, name = (root / "unified" if (root / "unified").is_dir() else root), "memory.max"
        elif "memory" in controllers.split(","):  # v1 memory controller
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        for ancestor in _ancestors(cgroup_path):
            yield base / ancestor.lstrip("/") / name


def cgroup_memory_limit(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> Optional[int]:
    """The smallest memory limit set on this process's cgroups (v1 or v2), or None without one."""
    limits = [limit for path in _limit_files(proc_cgroup, root) if (limit := _read_limit(path)) is not None]
    return min(limits, default=None)


def memory_limit_bytes(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> int:
    """The memory this process may use: the host's RAM, or the cgroup limit when that is smaller."""
    host = host_memory_bytes()
    limit = cgroup_memory_limit(proc_cgroup, root)
    return host if limit is None or limit <= 0 or limit >= host else limit
