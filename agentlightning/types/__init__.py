"""Data types shared by every layer: pydantic models, enums and constants only."""

from . import core, resources, tracer
from .core import *  # noqa: F403
from .resources import *  # noqa: F403
from .tracer import *  # noqa: F403

# Explicit so `agentlightning` re-exports these names at the top level (it star-exports `__all__`).
__all__: list[str] = []
__all__ += core.__all__
__all__ += resources.__all__
__all__ += tracer.__all__


def __getattr__(name: str) -> object:
    # `Hook` (v0.3: `agentlightning.types.Hook`) lives in the runner layer; see `types.core.__getattr__`.
    if name == "Hook":
        return core.__getattr__(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
