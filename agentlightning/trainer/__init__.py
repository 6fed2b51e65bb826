"""The Trainer and the component-spec builder it uses."""

from __future__ import annotations

from .init_utils import build_component
from .trainer import Trainer

__all__ = ["Trainer", "build_component"]
