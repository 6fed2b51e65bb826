"""RFT: rejection-sampling fine-tuning on GRPO's loop and learner (CPU or one GPU), extra `train`.

Importing this package does not import torch; the learner and the policy server import it when built.
"""

from __future__ import annotations

from .algorithm import RFT
from .config import RFTConfig
from .selection import ScoredRollout, Selection, select_rollouts

__all__ = ["RFT", "RFTConfig", "ScoredRollout", "Selection", "select_rollouts"]
