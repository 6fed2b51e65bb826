"""Deprecated alias of `agentlightning.emitter.reward`; import from `agentlightning.emitter` instead."""

import warnings

from agentlightning.emitter.reward import *  # noqa: F403
from agentlightning.emitter.reward import __all__ as __all__

warnings.warn(
    "agentlightning.reward is deprecated; import reward helpers from agentlightning.emitter",
    DeprecationWarning,
    stacklevel=2,
)
