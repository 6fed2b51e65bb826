"""v0.3's `agentlightning.utils.metrics` (metrics): the module is `agentlightning.tracking.metrics`."""

from agentlightning.tracking.metrics import *  # noqa: F403
from agentlightning.tracking.metrics import __all__ as __all__
