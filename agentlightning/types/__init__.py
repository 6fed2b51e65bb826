"""Data types shared by every layer: pydantic models, enums and constants only."""

from .core import *  # noqa: F403
from .resources import *  # noqa: F403
from .tracer import *  # noqa: F403
