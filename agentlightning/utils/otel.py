"""v0.3's `agentlightning.utils.otel` (span attributes): the module is `agentlightning.attributes.otel`."""

from agentlightning.attributes.otel import *  # noqa: F403
from agentlightning.attributes.otel import __all__ as __all__
