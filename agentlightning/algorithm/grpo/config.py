"""Every GRPO hyperparameter in one dataclass, with its default and meaning next to it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Literal, Optional, Union

from ...tracking import parse_backends
from .roles import normalize_roles

__all__ = ["GRPOConfig"]


@dataclass
class GRPOConfig:
    """Hyperparameters of GRPO (group relative policy optimization) for a Hugging Face causal LM."""

    # Rollouts
    group_size: int = 4
    """n: rollouts per task; advantages are normalised within each group."""
    batch_size: int = 8
    """Tasks per training step (so `batch_size * group_size` rollouts per step)."""
    total_steps: int = 10
    """Training steps to run (`GRPO.run` stops after this many)."""
    time_budget_s: Optional[float] = None
    """Wall-clock budget of the run, in seconds since `GRPO.run` began (None: none). The step whose rollouts
    are collected after the budget is spent is the last one: it finishes its update, then the final
    evaluation and checkpoint run as after `total_steps` (and no rollouts are prefetched for a next step)."""
    temperature: float = 1.0
    """Sampling temperature of training rollouts; the learner scores tokens at the same temperature."""
    max_new_tokens: int = 128
    """Completion length limit published to agents (`sampling_parameters["max_tokens"]`)."""
    rollout_timeout_s: float = 600.0
    """How long a step waits for its rollouts; unfinished ones are dropped from the step (async: carried over)
    and their tokens discarded as `timeout`. Also each rollout's `RolloutConfig.timeout_seconds` (the store
    marks an attempt running longer `timeout`), the policy server's hold of a call during a weight swap
    (`hold_timeout_s`) and the async drain of a swap: no inner limit is shorter."""
    async_rollouts: bool = False
    """Bounded-staleness async: the next step's rollouts are generated while the learner updates. The
    policy server then serves its own copy of the weights, swapped after each update (pause, 429 +
    Retry-After to new requests, drain, swap, resume)."""
    max_staleness: int = 1
    """Async: a group with a sample produced by a policy more than this many updates old is dropped whole
    (counted in `groups_dropped_stale` and `samples_stale_dropped`)."""
    min_complete_groups: Optional[int] = None
    """Async: a step trains on complete groups only (every sibling rollout finished). It waits, at most
    `rollout_timeout_s`, until this many of its pending groups (its own `batch_size` plus those carried
    over from earlier steps) are complete and usable (not all failed, not stale), or until no group is
    pending; then it trains on every usable complete group and carries the others over, their rollouts
    still running (`groups_carried_over`). None: `batch_size`. A value below `batch_size` lets a step go
    without its slowest groups."""
    is_ratio_cap: float = 2.0
    """Async: cap of the truncated importance weight pi_prox / pi_behaviour applied to every token."""
    deterministic: bool = False
    """Same seed, same run (on CPU, same machine and thread count): the same rollouts, rewards, updates and
    validation results. Costs speed: every rollout of a step is generated on the same weights
    (`async_rollouts` must be off), the policy server decodes one request at a time without prefix cache
    and seeds each request from its content (not its arrival), a step's rollouts are put in a canonical
    order (by group, then token ids) before the update, and torch runs deterministic algorithms."""
    verify_weight_sync: bool = True
    """After every update (and at the start), ask the policy server for the fingerprint of what it serves
    (version, adapters, checksums of watched tensors; `serving/fingerprint.py`) and compare it with the
    learner's weights; a difference stops the run with `WeightSyncError` naming the tensor."""
    weight_sync_watch_per_layer: int = 2
    """Tensors the weight-sync check watches per layer (and per adapter and layer), spread evenly by name;
    tensors outside layers are all watched; 0 watches every tensor."""
    strict_token_accounting: bool = False
    """Every step the algorithm checks that its token accounting closes (generated = trained + discarded +
    change of in flight, `algorithm/grpo/tokens.py`); a gap is logged as an error, or with True raised as
    `TokenAccountingError` (tests)."""
    val_interval: int = 0
    """Evaluate on the validation set every this many steps (0: only before training and at the end)."""
    val_temperature: float = 0.0
    """Sampling temperature for validation rollouts (0: greedy)."""

    # Rows and advantages
    aggregation: Literal["trajectory", "transition"] = "trajectory"
    """How a rollout's LLM calls become training rows: merged while their token ids are continuous
    ("trajectory"), or one row per call ("transition"); see `algorithm/grpo/batch.py`."""
    advantage_level: Literal["rollout", "turn"] = "rollout"
    """"rollout": one advantage per rollout (its total return vs its group) on all its rows; "turn": each
    row gets the advantage of its first call's discounted return-to-go."""
    step_advantage_weight: float = 0.0
    """w: add w x the GiGPO-style step advantage (turns that saw the same observation across a group's
    rollouts, their discounted returns normalised together) to each call's advantage; 0 turns it off."""
    turn_discount: float = 1.0
    """gamma: per-turn discount of later rewards in a multi-turn rollout (1.0: every turn gets the return)."""
    scale_advantages: bool = True
    """Divide group-centred rewards by the group std (GRPO); False keeps only centring (Dr. GRPO)."""
    reward_fill_value: float = 0.0
    """Reward for a rollout that reported none."""
    advantage_eps: float = 1e-6
    """Added to the group std before dividing."""

    # Policy update
    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: Optional[float] = 1.0
    """Clip the global gradient norm (None: no clipping)."""
    epochs_per_batch: int = 1
    """mu: optimisation passes over each batch of samples."""
    max_updates_per_batch: Optional[int] = None
    """Cap on optimizer steps per batch, across all epochs (None: no cap)."""
    skip_no_signal_updates: bool = False
    """Skip the learner update of a step in which every row's advantage is zero (all rewards equal within
    every group) and no KL or entropy term is set: its policy gradient is zero, so the forward/backward
    passes would only move the weights by AdamW's momentum and weight decay. Counted in `update_skipped`."""
    drop_tied_groups: bool = False
    """Train only on the rows of groups whose rollouts did not all tie (DAPO's dynamic-sampling filter). A
    tied group's rows carry zero advantage: they add no policy gradient but cost forward/backward passes
    and dilute the per-rollout loss average. Counted in `groups_tied_dropped`; a step left with no row
    skips its update like `skip_no_signal_updates`. With `kl_coef` / `entropy_coef` set, tied rows would
    still carry those terms, so they are kept."""
    micro_batch_size: int = 4
    """Samples per forward/backward pass."""
    shared_prefix_min_tokens: int = 32
    """When the rows of a micro-batch start with at least this many identical tokens (a system prompt,
    few-shot turns, a group's prompt), that prefix goes through the model once and its KV cache serves
    every row: the same logits and gradients for fewer FLOPs (see `algorithm/grpo/prefix.py`). 0: off."""
    backward_chunk_tokens: int = 256
    """Training's peak memory: the rows of a micro-batch go forward and backward in chunks of at most this many
    tokens past their shared prefix (a longer row alone), each chunk's activations and logits freed before
    the next; the prefix is still encoded once per micro-batch. The same gradients and FLOPs as one pass
    (see `algorithm/grpo/prefix.py`). 0: the whole micro-batch at once."""
    gradient_accumulation_steps: Optional[int] = None
    """Micro-batches per optimizer step; None accumulates the whole batch into one step per epoch."""
    freeze_embeddings: bool = False
    """Full fine-tuning without the token embeddings: the input and output embedding matrices (one tied matrix
    in SmolLM2 and Qwen2.5-0.5B, a fifth of the weights) stay as loaded, so they carry no gradient or AdamW
    state (12 bytes a weight in float32) and their gradient is never computed. Checkpoints then hold the
    other weights. Ignored with LoRA (the base is frozen anyway)."""
    clip_eps_low: float = 0.2
    """epsilon: lower clip of the probability ratio (1 - eps)."""
    clip_eps_high: float = 0.2
    """Upper clip (1 + eps_high); > clip_eps_low gives DAPO's clip-higher."""
    kl_coef: float = 0.0
    """beta: weight of the k3 KL estimate to the reference policy (0: no reference model needed)."""
    entropy_coef: float = 0.0
    """Bonus for token entropy (0: entropy is only logged)."""
    loss_aggregation: Literal["rollout-mean", "token-mean", "sequence-mean"] = "rollout-mean"
    """Every rollout weighs the same ("rollout-mean": each row's token sum / its rollout's trained tokens,
    / rollouts of the step), or the mean over all tokens of the step, or per row then over rows."""
    max_prompt_length: int = 1024
    """A row whose (first) prompt is longer is dropped (counted in `rows_dropped_prompt_too_long`)."""
    max_response_length: int = 512
    """Tokens after the prompt kept per row (the rest is cut, counted in `rows_truncated`)."""

    # LoRA (peft)
    lora_rank: int = 0
    """r: LoRA rank; 0 trains all weights. With LoRA the reference policy is the adapter-disabled base."""
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_target_modules: List[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    roles: Union[Dict[str, str], List[str]] = field(default_factory=lambda: {})
    """One LoRA adapter per agent role, on the same frozen base: `{role: agent_match regex}` (a list of names:
    each matches itself exactly). A role's calls train only its adapter (own optimizer state); the policy
    server serves it as `<model>:<role>`, published as the resource `<role>_llm`. Needs `lora_rank > 0`;
    see `algorithm/grpo/roles.py`. Empty: one policy."""

    # Bookkeeping
    seed: int = 0
    checkpoint_dir: Optional[str] = None
    """Where checkpoints and metrics go (None: no checkpoints, metrics only if `metrics_path`)."""
    checkpoint_interval: int = 1
    """Save a checkpoint every this many steps (when `checkpoint_dir` is set)."""
    keep_checkpoints: int = 2
    """Checkpoints kept on disk (older ones are deleted)."""
    metrics_path: Optional[str] = None
    """JSONL metrics file; defaults to `<checkpoint_dir>/metrics.jsonl` when a checkpoint dir is set."""
    device: Optional[str] = None
    """"cpu", "cuda", ...; None or "auto" picks CUDA when available."""
    serve_dtype: str = "auto"
    """Weights dtype of the policy server: "auto" serves bfloat16 on CUDA and the learner's dtype (float32)
    on CPU; "float32", "bfloat16", "float16". A dtype other than the learner's serves a copy, updated after
    each step (`weight_sync_ms` in the metrics)."""
    serve_fuse: Optional[bool] = None
    """Serve from fused projections (`serving/fused.py`; on CPU from oneDNN-prepacked copies of the weights,
    about 1.8x faster decoding at 8 rows). None: on CUDA, and on CPU when the server serves the learner's own
    weights (sync rollouts in the learner's dtype), where the copies are dropped during each update and
    packed again after it, so they add nothing to the update's peak memory; off for a served copy on CPU."""
    tracking: List[str] = field(default_factory=lambda: [])
    """Experiment tracking backends the metrics also go to: any of "wandb", "mlflow", "tensorboard" (empty:
    `AGL_TRACKING`, else none; `Trainer(tracking=...)` wins). See `agentlightning.tracking`."""
    tracking_dir: Optional[str] = None
    """Where tracking backends write locally (None: `<checkpoint_dir>/tracking` when a checkpoint dir is set,
    else each library's default)."""

    def __post_init__(self) -> None:
        checks = {
            "group_size": self.group_size >= 1,
            "batch_size": self.batch_size >= 1,
            "micro_batch_size": self.micro_batch_size >= 1,
            "epochs_per_batch": self.epochs_per_batch >= 1,
            "temperature": self.temperature > 0,
            "clip_eps_low": 0 <= self.clip_eps_low < 1,
            "clip_eps_high": self.clip_eps_high >= 0,
            "turn_discount": 0 <= self.turn_discount <= 1,
            "step_advantage_weight": self.step_advantage_weight >= 0,
            "max_staleness": self.max_staleness >= 0,
            "min_complete_groups": self.min_complete_groups is None or self.min_complete_groups >= 1,
            "shared_prefix_min_tokens": self.shared_prefix_min_tokens >= 0,
            "backward_chunk_tokens": self.backward_chunk_tokens >= 0,
            "is_ratio_cap": self.is_ratio_cap >= 1,
            "lora_rank": self.lora_rank >= 0,
            "checkpoint_interval": self.checkpoint_interval >= 1,
            "max_prompt_length": self.max_prompt_length >= 1,
            "max_response_length": self.max_response_length >= 1,
            "time_budget_s": self.time_budget_s is None or self.time_budget_s > 0,
            "weight_sync_watch_per_layer": self.weight_sync_watch_per_layer >= 0,
        }
        self.roles = normalize_roles(self.roles)
        self.tracking = parse_backends(self.tracking)
        if self.roles and self.lora_rank == 0:
            raise ValueError(
                f"roles={sorted(self.roles)} train one LoRA adapter per role; set lora_rank > 0 (e.g. lora_rank=8)"
            )
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            raise ValueError(f"invalid GRPOConfig: {values} (see the field docs in algorithm/grpo/config.py)")
        if self.deterministic and self.async_rollouts:
            raise ValueError(
                "deterministic=True needs async_rollouts=False: async rollouts are sampled by whichever weights "
                "are served when they run, which timing decides"
            )
        if self.gradient_accumulation_steps is not None and self.gradient_accumulation_steps < 1:
            raise ValueError(
                f"gradient_accumulation_steps must be >= 1 or None, got {self.gradient_accumulation_steps}"
            )
        if self.max_updates_per_batch is not None and self.max_updates_per_batch < 1:
            raise ValueError(f"max_updates_per_batch must be >= 1 or None, got {self.max_updates_per_batch}")
        choices = {
            "loss_aggregation": ("rollout-mean", "token-mean", "sequence-mean"),
            "aggregation": ("trajectory", "transition"),
            "advantage_level": ("rollout", "turn"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")

    @property
    def role_patterns(self) -> Dict[str, str]:
        """`roles` as `{role: agent-name regex}` (a list of names is normalised to exact matches)."""
        return normalize_roles(self.roles)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Dict[str, Any]) -> GRPOConfig:
        """Build from a dict (e.g. a saved checkpoint); unknown keys raise a TypeError naming them."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"unknown GRPOConfig fields {unknown}; valid fields: {sorted(known)}")
        data = dict(values)
        if "adam_betas" in data:
            data["adam_betas"] = tuple(data["adam_betas"])
        return cls(**data)
