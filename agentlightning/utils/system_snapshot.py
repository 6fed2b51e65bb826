"""A JSON-friendly snapshot of host and process health, sent as the runner's worker heartbeat."""

from __future__ import annotations

import logging
import os
import platform
import time
from typing import Any, Optional

import psutil

__all__ = ["system_snapshot"]

logger = logging.getLogger(__name__)

_process: Optional[psutil.Process] = None


def _own_process() -> psutil.Process:
    # One Process object per process, so cpu_percent() measures the time since the previous snapshot.
    global _process
    if _process is None or _process.pid != os.getpid():
        _process = psutil.Process()
    return _process


def _cpu() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "usage_percent": psutil.cpu_percent(interval=None),
        "load_average": [float(x) for x in load],
    }


def _memory() -> dict[str, Any]:
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    return {
        "total_bytes": vm.total,
        "available_bytes": vm.available,
        "used_bytes": vm.used,
        "usage_percent": vm.percent,
        "swap_used_bytes": swap.used,
        "swap_percent": swap.percent,
    }


def _disk() -> dict[str, Any]:
    try:
        usage = psutil.disk_usage(os.path.abspath(os.sep))
    except OSError:
        return {}
    return {
        "total_bytes": usage.total,
        "used_bytes": usage.used,
        "free_bytes": usage.free,
        "usage_percent": usage.percent,
    }


def _network() -> dict[str, Any]:
    try:
        io = psutil.net_io_counters()
    except (OSError, RuntimeError):
        return {}
    if io is None:
        return {}
    return {
        "bytes_sent": io.bytes_sent,
        "bytes_recv": io.bytes_recv,
        "packets_sent": io.packets_sent,
        "packets_recv": io.packets_recv,
    }


def _process_stats() -> dict[str, Any]:
    proc = _own_process()
    with proc.oneshot():
        mem = proc.memory_info()
        return {
            "pid": proc.pid,
            "cpu_percent": proc.cpu_percent(interval=None),
            "rss_bytes": mem.rss,
            "vms_bytes": mem.vms,
            "num_threads": proc.num_threads(),
            "create_time": proc.create_time(),
        }


def _gpus() -> list[dict[str, Any]]:
    try:
        import gpustat  # type: ignore[import-not-found]
    except ImportError:
        return []
    try:
        stats = gpustat.new_query()
    except Exception as exc:  # no driver, no NVML: report no GPUs rather than failing the heartbeat
        logger.debug("gpustat query failed: %s", exc)
        return []
    return [
        {
            "index": gpu.index,
            "name": gpu.name,
            "utilization_percent": gpu.utilization,
            "memory_used_mb": gpu.memory_used,
            "memory_total_mb": gpu.memory_total,
            "temperature_c": gpu.temperature,
        }
        for gpu in stats.gpus
    ]


def system_snapshot(include_gpu: bool = False) -> dict[str, Any]:
    """CPU, memory, disk, network and own-process stats (plus GPUs via gpustat when asked and installed).

    Non-blocking: CPU percentages are measured since the previous call (0.0 on the very first one).
    """
    snapshot: dict[str, Any] = {
        "timestamp": time.time(),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": _cpu(),
        "memory": _memory(),
        "disk": _disk(),
        "network": _network(),
        "process": _process_stats(),
    }
    if include_gpu:
        snapshot["gpus"] = _gpus()
    return snapshot
