"""Lazy re-exports for a package `__init__`: each name loads from its module on first access."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any, Callable


def lazy_exports(package: str, modules: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's `__getattr__` and `__dir__` for `modules`: exported name -> relative module (`.server`)."""

    def __getattr__(name: str) -> Any:
        if name in modules:
            return getattr(importlib.import_module(modules[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(modules))

    return __getattr__, __dir__
