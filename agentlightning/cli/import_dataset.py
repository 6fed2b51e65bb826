"""`agl import`: see `agentlightning.cli.dataset`."""

from __future__ import annotations

from .dataset import import_main as main

__all__ = ["main"]
