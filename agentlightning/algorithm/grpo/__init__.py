"""GRPO: torch-native RL for Hugging Face causal LMs (CPU or one GPU), extra `train`.

Importing this package does not import torch; the learner and the policy server import it when built.
"""

from __future__ import annotations

from .advantages import group_advantages, step_advantages, turn_returns
from .algorithm import GRPO
from .batch import RolloutTriplets, Sample, TokenBatch, collate, samples_from_rollouts, triplet_tokens
from .config import GRPOConfig
from .learner import GRPOLearner
from .loss import GRPOLossOutput, grpo_loss, token_logprobs
from .metrics import MetricsWriter, plot_reward_curve, read_metrics

__all__ = [
    "GRPO",
    "GRPOConfig",
    "GRPOLearner",
    "GRPOLossOutput",
    "MetricsWriter",
    "RolloutTriplets",
    "Sample",
    "TokenBatch",
    "collate",
    "group_advantages",
    "grpo_loss",
    "plot_reward_curve",
    "read_metrics",
    "samples_from_rollouts",
    "step_advantages",
    "token_logprobs",
    "triplet_tokens",
    "turn_returns",
]
