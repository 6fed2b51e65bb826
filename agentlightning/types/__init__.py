"""Data types shared by every layer: pydantic models, enums and constants only."""

from . import core, resources, tracer
from .core import *  # noqa: F403
from .hooks import Hook
from .resources import *  # noqa: F403
from .tracer import *  # noqa: F403

# Explicit so `agentlightning` re-exports these names at the top level.
__all__: list[str] = ["Hook"]
__all__ += core.__all__
__all__ += resources.__all__
__all__ += tracer.__all__
