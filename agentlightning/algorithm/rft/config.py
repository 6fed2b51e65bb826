"""Every RFT hyperparameter in one dataclass, with its default and meaning next to it."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Literal, Optional

from ..grpo.config import GRPOConfig
from .selection import Selection

__all__ = ["RFTConfig"]


@dataclass
class RFTConfig:
    """Hyperparameters of rejection-sampling fine-tuning: sample, keep the best, fine-tune on them, repeat."""

    # Sampling
    rounds: int = 1
    """Sample -> select -> fine-tune cycles; each round samples with the weights the previous one trained."""
    max_empty_rounds: int = 0
    """Rounds that keep no rollout (so train nothing) do not count toward `rounds`: up to this many of them
    are sampled again, on the next tasks (so a run makes at most `rounds + max_empty_rounds` rounds; after
    a restart the rounds before it count as training ones)."""
    tasks_per_round: int = 8
    """Training tasks sampled per round (consecutive slices of seeded shuffles of the training set)."""
    group_size: int = 8
    """k: rollouts per task; "best_per_group" compares a task's k rollouts."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (the fine-tuning itself scores at temperature 1)."""
    max_new_tokens: int = 128
    """Completion length limit published to agents (`sampling_parameters["max_tokens"]`)."""
    rollout_timeout_s: float = 600.0
    """How long a round waits for its rollouts; unfinished ones are left out."""

    # Selection
    selection: Selection = "best_per_group"
    """"best_per_group": the best `keep_per_group` rollouts of each task; "threshold": every rollout whose
    return reaches `reward_threshold` (see `rft/selection.py`)."""
    reward_threshold: Optional[float] = None
    """Minimum return of a kept rollout (required by "threshold"). Without it "best_per_group" keeps a
    group's best only when it beats the group's worst."""
    keep_per_group: int = 1
    """"best_per_group": rollouts kept per task at most."""

    # Fine-tuning (supervised: the negative log-likelihood of the kept rollouts' generated tokens)
    epochs: int = 2
    """Passes over a round's kept rows."""
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: Optional[float] = 1.0
    micro_batch_size: int = 4
    """Rows per forward/backward pass."""
    gradient_accumulation_steps: Optional[int] = None
    backward_chunk_tokens: int = 256
    """Rows go backward in chunks of this many tokens past their shared prefix (see `GRPOConfig`)."""
    freeze_embeddings: bool = False
    """The token embeddings stay as loaded (see `GRPOConfig.freeze_embeddings`)."""
    """Micro-batches per optimizer step; None: one optimizer step per epoch."""
    loss_aggregation: Literal["rollout-mean", "token-mean", "sequence-mean"] = "token-mean"
    """"token-mean": every generated token counts the same; "rollout-mean": every kept rollout does."""
    aggregation: Literal["trajectory", "transition"] = "trajectory"
    """How a rollout's LLM calls become rows (as in GRPO; `algorithm/grpo/batch.py`)."""
    max_prompt_length: int = 1024
    max_response_length: int = 512

    # LoRA (peft)
    lora_rank: int = 0
    """r: LoRA rank; 0 trains all weights."""
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_target_modules: List[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    # Validation and bookkeeping
    val_interval: int = 0
    """Evaluate on the validation set every this many rounds (0: only before the first and after the last)."""
    val_temperature: float = 0.0
    seed: int = 0
    checkpoint_dir: Optional[str] = None
    """Checkpoints after each round (a restarted run continues after the last one) and `metrics.jsonl`."""
    keep_checkpoints: int = 2
    metrics_path: Optional[str] = None
    device: Optional[str] = None
    """"cpu", "cuda", ...; None picks CUDA when available."""
    serve_dtype: str = "auto"
    """Weights dtype of the policy server (as in GRPO): "auto" serves bfloat16 on CUDA, float32 on CPU."""
    serve_fuse: Optional[bool] = None
    """Serve from fused (on CPU prepacked) projections, as in GRPO; None: where they cost no peak memory."""

    def __post_init__(self) -> None:
        checks = {
            "rounds": self.rounds >= 1,
            "tasks_per_round": self.tasks_per_round >= 1,
            "group_size": self.group_size >= 1,
            "keep_per_group": self.keep_per_group >= 1,
            "epochs": self.epochs >= 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            raise ValueError(f"invalid RFTConfig: {values} (each must be >= 1)")
        if self.max_empty_rounds < 0:
            raise ValueError(f"invalid RFTConfig: max_empty_rounds={self.max_empty_rounds!r} (must be >= 0)")
        if self.selection not in ("best_per_group", "threshold"):
            raise ValueError(f"selection must be 'best_per_group' or 'threshold', got {self.selection!r}")
        if self.selection == "threshold" and self.reward_threshold is None:
            raise ValueError("RFTConfig(selection='threshold') needs reward_threshold=<minimum return to keep>")
        self.learner_config()  # the shared fields (lengths, LoRA, loss aggregation...) are checked there

    def learner_config(self) -> GRPOConfig:
        """The configuration of the GRPO loop and learner RFT runs on (a round is one of its steps).

        Fields of the same name carry over (sampling, fine-tuning, LoRA, bookkeeping); the rest are RFT's names.
        """
        shared = {name: copy.copy(getattr(self, name)) for name in _LEARNER_FIELDS}
        return GRPOConfig(
            **shared,
            batch_size=self.tasks_per_round,
            total_steps=self.rounds + self.max_empty_rounds,
            epochs_per_batch=self.epochs,
        )

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Dict[str, Any]) -> RFTConfig:
        """Build from a dict; unknown keys raise a TypeError naming them."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"unknown RFTConfig fields {unknown}; valid fields: {sorted(known)}")
        return cls(**values)


_LEARNER_FIELDS = sorted(set(RFTConfig.__dataclass_fields__) & set(GRPOConfig.__dataclass_fields__))
