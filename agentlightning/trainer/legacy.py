"""Old path of the v0.1 training entry point; it lives in `agentlightning.compat.trainer_legacy`."""

from agentlightning.compat.trainer_legacy import TrainerLegacy

__all__ = ["TrainerLegacy"]
