"""`agl export`: see `agentlightning.cli.dataset`."""

from __future__ import annotations

from .dataset import export_main as main

__all__ = ["main"]
