"""A Tinker-compatible training service: the official `tinker` SDK and tinker-cookbook recipes train and
sample through our GRPO learner (LoRA) and policy engine (`agl tinker`; docs/tinker.md)."""

from .config import TinkerConfig
from .errors import TinkerError, TinkerNotFound, TinkerUserError
from .server import TinkerServer
from .service import TinkerService

__all__ = ["TinkerConfig", "TinkerServer", "TinkerService", "TinkerError", "TinkerNotFound", "TinkerUserError"]
