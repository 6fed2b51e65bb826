"""The GRPO objective: clipped policy gradient + optional k3 KL to a reference + optional entropy bonus.

Per response token t of sample i (pi_theta: current policy, pi_old: the sampler, pi_ref: reference):

    ratio_t   = exp(log pi_theta(x_t) - log pi_old(x_t))
    pg_t      = max(-A_i * ratio_t, -A_i * clip(ratio_t, 1 - eps_low, 1 + eps_high))
    kl_t      = exp(log pi_ref - log pi_theta) - (log pi_ref - log pi_theta) - 1       # k3, >= 0
    loss_t    = pg_t + beta * kl_t - entropy_coef * H_t

and the loss is aggregated over the trained tokens of an optimizer step in one of three ways:

- "rollout-mean" (default): each row's token sum is divided by its rollout's trained tokens (all its
  rows together), and the step by its number of rollouts: every rollout weighs the same, however many
  LLM calls (rows) it made and however long they were;
- "token-mean": the mean over all tokens of the step (long, many-call rollouts weigh more);
- "sequence-mean": the mean over rows of each row's token mean (the original GRPO paper).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Optional, Tuple

if TYPE_CHECKING:
    import torch

__all__ = [
    "GRPOLossOutput",
    "Objective",
    "StepScale",
    "token_logprobs",
    "token_entropy",
    "grpo_loss",
    "nll_loss",
    "aggregate",
]

Objective = Literal["grpo", "nll"]
"""What a learner update minimises: the GRPO objective, or the supervised negative log-likelihood (RFT)."""


@dataclass
class StepScale:
    """What normalises a micro-batch's loss so the micro-batches of an optimizer step add up to its loss."""

    num_tokens: float
    num_sequences: float
    total_weight: float


@dataclass
class GRPOLossOutput:
    """The differentiable `loss` plus detached statistics (token means over the response tokens)."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    kl: torch.Tensor
    entropy: torch.Tensor
    clip_fraction: torch.Tensor
    ratio: torch.Tensor


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0, *, with_entropy: bool = False
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """`[B, L]` log pi(x_t | x_<t) at `temperature` (column 0 is 0), and optionally the token entropy H_t."""
    import torch

    scaled = logits[:, :-1, :].float()
    if temperature != 1.0:  # x / 1.0 is x: no float32 copy of the logits for the common case
        scaled = scaled / temperature
    log_norm = torch.logsumexp(scaled, dim=-1)
    chosen = scaled.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1) - log_norm
    logprobs = torch.nn.functional.pad(chosen, (1, 0))
    if not with_entropy:
        return logprobs, None
    probs = torch.softmax(scaled, dim=-1)
    entropy = log_norm - (probs * scaled).sum(dim=-1)
    return logprobs, torch.nn.functional.pad(entropy, (1, 0))


def token_entropy(logits: torch.Tensor, temperature: float = 1.0, *, rows_per_chunk: int = 1) -> torch.Tensor:
    """`[B, L]` token entropy H_t at `temperature` (column 0 is 0), without gradients, `rows_per_chunk` rows at a
    time: the same values as `token_logprobs(..., with_entropy=True)` with a fraction of its vocabulary-wide
    temporaries (a float32 softmax and a product the size of the logits)."""
    import torch

    with torch.no_grad():
        chunks = []
        for start in range(0, logits.shape[0], max(1, rows_per_chunk)):
            scaled = logits[start : start + rows_per_chunk, :-1, :].detach().float()
            if temperature != 1.0:
                scaled = scaled / temperature
            log_norm = torch.logsumexp(scaled, dim=-1)
            chunks.append(log_norm - (torch.softmax(scaled, dim=-1) * scaled).sum(dim=-1))
            del scaled
        return torch.nn.functional.pad(torch.cat(chunks, dim=0), (1, 0))


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    num_tokens: float,
    num_sequences: float,
    row_weights: Optional[torch.Tensor] = None,
    total_weight: Optional[float] = None,
) -> torch.Tensor:
    """Sum of `values` over masked tokens normalised for the whole optimizer step, so micro-batches add up.

    "token-mean": divide by all response tokens of the step; "sequence-mean": average within each sequence,
    then divide by all sequences of the step; "rollout-mean": weight row i's token sum by `row_weights[i]`
    (1 / its rollout's trained tokens) and divide by `total_weight` (sum of weight x tokens over the step's
    rows: the number of rollouts when the step holds whole rollouts).
    """
    if mode == "rollout-mean":
        weights = row_weights if row_weights is not None else 1.0 / mask.sum(dim=-1).clamp(min=1.0)
        if total_weight is None:
            total_weight = float((weights * mask.sum(dim=-1)).sum().item())
        return ((values * mask).sum(dim=-1) * weights).sum() / max(total_weight, 1e-12)
    if mode == "token-mean":
        return (values * mask).sum() / max(num_tokens, 1.0)
    if mode == "sequence-mean":
        per_sequence = (values * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)
        return per_sequence.sum() / max(num_sequences, 1.0)
    raise ValueError(f"unknown loss aggregation {mode!r}; use 'rollout-mean', 'token-mean' or 'sequence-mean'")


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    ref_logprobs: Optional[torch.Tensor] = None,
    kl_coef: float = 0.0,
    entropy: Optional[torch.Tensor] = None,
    entropy_coef: float = 0.0,
    aggregation: str = "token-mean",
    num_tokens: Optional[float] = None,
    num_sequences: Optional[float] = None,
    row_weights: Optional[torch.Tensor] = None,
    total_weight: Optional[float] = None,
    is_weights: Optional[torch.Tensor] = None,
) -> GRPOLossOutput:
    """The GRPO loss of one micro-batch (`[B, L]` tensors; `advantages` `[B]`, or `[B, L]` per token); see the
    module docstring.

    `num_tokens` / `num_sequences` / `total_weight` are the totals of the whole optimizer step (default:
    this micro-batch); `row_weights` `[B]` are the "rollout-mean" weights (default: each row its own rollout).
    `is_weights` `[B, L]` (async training) scale each token's policy-gradient term: the truncated importance
    weight pi_prox / pi_behaviour, with `old_logprobs` then being pi_prox.
    """
    import torch

    num_tokens = float(mask.sum().item()) if num_tokens is None else num_tokens
    num_sequences = float(mask.shape[0]) if num_sequences is None else num_sequences
    A = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages  # [B] per row or [B, L] per token

    # Multiplying log-ratios by the mask keeps padding/prompt positions finite (exp of 0), never inf * 0.
    ratio = torch.exp((logprobs - old_logprobs) * mask)
    pg_unclipped = -A * ratio
    pg_clipped = -A * torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    pg = torch.maximum(pg_unclipped, pg_clipped)
    per_token = pg if is_weights is None else pg * is_weights.detach()

    kl = torch.zeros_like(logprobs)
    if ref_logprobs is not None:
        log_ratio = (ref_logprobs - logprobs) * mask
        kl = torch.exp(log_ratio) - log_ratio - 1.0
        if kl_coef:
            per_token = per_token + kl_coef * kl
    if entropy is not None and entropy_coef:
        per_token = per_token - entropy_coef * entropy

    loss = aggregate(
        per_token,
        mask,
        aggregation,
        num_tokens=num_tokens,
        num_sequences=num_sequences,
        row_weights=row_weights,
        total_weight=total_weight,
    )

    def token_mean(values: torch.Tensor) -> torch.Tensor:
        return ((values.detach() * mask).sum() / mask.sum().clamp(min=1.0)).detach()

    return GRPOLossOutput(
        loss=loss,
        pg_loss=token_mean(pg),
        kl=token_mean(kl),
        entropy=token_mean(entropy) if entropy is not None else torch.zeros(()),
        clip_fraction=token_mean((pg_clipped > pg_unclipped).float()),
        ratio=token_mean(ratio),
    )


def nll_loss(
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    entropy: Optional[torch.Tensor] = None,
    aggregation: str = "token-mean",
    num_tokens: Optional[float] = None,
    num_sequences: Optional[float] = None,
    row_weights: Optional[torch.Tensor] = None,
    total_weight: Optional[float] = None,
) -> GRPOLossOutput:
    """Supervised fine-tuning on selected samples (rejection sampling): -log pi_theta(x_t) over the trained
    tokens, aggregated like `grpo_loss`. `pg_loss` reports the token-mean NLL; `entropy` is only logged."""
    import torch

    num_tokens = float(mask.sum().item()) if num_tokens is None else num_tokens
    num_sequences = float(mask.shape[0]) if num_sequences is None else num_sequences
    nll = -logprobs * mask
    loss = aggregate(
        nll,
        mask,
        aggregation,
        num_tokens=num_tokens,
        num_sequences=num_sequences,
        row_weights=row_weights,
        total_weight=total_weight,
    )
    denominator = mask.sum().clamp(min=1.0)
    zero = torch.zeros(())
    return GRPOLossOutput(
        loss=loss,
        pg_loss=(nll.detach().sum() / denominator).detach(),
        kl=zero,
        entropy=((entropy.detach() * mask).sum() / denominator).detach() if entropy is not None else zero,
        clip_fraction=zero,
        ratio=torch.ones(()),
    )
