"""What GRPO and RFT hand over in a schedule (`algorithm/schedule.py`): the weights they trained, to the next
algorithm that trains the same model, which continues from them instead of loading the model again."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

from ...adapter.triplet import TracerTraceToTriplet, TraceToTripletBase
from ..base import TrainedPolicy

if TYPE_CHECKING:
    from .config import GRPOConfig
    from .learner import GRPOLearner

__all__ = ["PolicyHandoff"]

logger = logging.getLogger(__name__)


class PolicyHandoff:
    """Mixin of the algorithms built on `GRPOLearner`: triplet adapters, and weights in and out of a schedule."""

    NAME = "GRPO"
    model_spec: Any
    tokenizer: Any
    config: GRPOConfig
    learner: Optional[GRPOLearner]
    _continued_from: Optional[TrainedPolicy] = None
    _handed_over: Optional[TrainedPolicy] = None

    def accepts_adapter(self, adapter: Any) -> bool:
        return isinstance(adapter, TraceToTripletBase)

    def default_adapter(self) -> TracerTraceToTriplet:
        return TracerTraceToTriplet()

    def model_source(self) -> str:
        """What the model was loaded from: the `model` argument, or that of the algorithm it continues."""
        if self._continued_from is not None:
            return self._continued_from.source
        return self.model_spec if isinstance(self.model_spec, str) else "a loaded model"

    def served_model_name(self) -> str:
        """The model name the policy server answers to (`grpo-smollm2`; `grpo-policy` for a loaded model)."""
        suffix = self.model_spec if isinstance(self.model_spec, str) else "policy"
        return f"{self.NAME.lower()}-{suffix}"

    def continue_from(self, policy: TrainedPolicy) -> None:
        """Train `policy` (an earlier stage's weights) instead of loading `model`; they must be the same model."""
        spec = self.model_spec
        same = spec == policy.source if isinstance(spec, str) else spec is policy.model
        if not same:
            mine = spec if isinstance(spec, str) else "another loaded model"
            raise ValueError(
                f"{self.NAME} would continue from the weights {policy.trained_by} trained on {policy.source!r}, but "
                f"was given model={mine!r}; give every stage of the schedule the same model"
            )
        self.model_spec, self.tokenizer, self._continued_from = policy.model, policy.tokenizer, policy

    def get_trained_policy(self) -> Optional[TrainedPolicy]:
        """The trained weights (LoRA merged into the model, in place: call after `run`), or None before it."""
        if self._handed_over is not None:
            return self._handed_over
        if self.learner is None:
            return None
        if self.learner.roles:
            logger.warning(
                "%s trained one LoRA adapter per role; a later stage of the schedule cannot continue from them",
                self.NAME,
            )
            return None
        model: Any = self.learner.policy
        if self.learner.uses_lora:  # peft froze the base weights: a full fine-tune after this trains them again
            model = model.merge_and_unload().requires_grad_(True)
        for weight in self.learner.frozen_embeddings:  # this stage's `freeze_embeddings`; the next has its own
            weight.requires_grad_(True)
        self._handed_over = TrainedPolicy(
            model=model, tokenizer=self.learner.tokenizer, source=self.model_source(), trained_by=self.NAME
        )
        # The next stage trains these weights with an optimizer of its own: this one's state (twice the
        # weights' size with AdamW) would stay in memory for nothing.
        self.learner.release_optimizer_state()
        return self._handed_over
