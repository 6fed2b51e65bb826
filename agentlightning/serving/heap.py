"""Give freed memory back to the OS, so that a training process stays flat from one step to the next.

PyTorch on CPU allocates tensors with the C library's malloc. glibc keeps one heap (arena) per thread that
allocated, up to 8 per core, and keeps what is freed in them for reuse: a learner update run from a new
worker thread each step (`asyncio.to_thread`) and a policy server decoding in its own thread each hold
their own few gigabytes of freed activations, and the process grows step after step. Fewer arenas and a
`malloc_trim` after each update keep it at one update's worth. Elsewhere (macOS, musl) these are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from functools import lru_cache
from typing import Any, Optional

__all__ = ["limit_malloc_arenas", "release_free_memory"]

logger = logging.getLogger(__name__)

_M_ARENA_MAX = -8  # glibc's mallopt parameter


@lru_cache(maxsize=1)
def _glibc() -> Optional[Any]:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas for threads that start allocating from now on (`MALLOC_ARENA_MAX`);
    True when applied. Call it before starting the threads that allocate tensors."""
    if arenas < 1:
        raise ValueError(f"arenas must be >= 1, got {arenas}")
    libc = _glibc()
    return bool(libc is not None and libc.mallopt(_M_ARENA_MAX, arenas) == 1)


def release_free_memory() -> bool:
    """Return the free pages of every malloc arena to the OS (`malloc_trim(0)`); True when memory was released."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0) == 1)
