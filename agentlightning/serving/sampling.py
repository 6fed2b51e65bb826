"""Batched token sampling for a causal LM: one left-padded forward per step, per-row sampling parameters.

Logprob convention (what the server returns and GRPO trains against): the log-probability of the sampled
token under `softmax(logits / temperature)`, before top-k/top-p truncation and penalties; greedy rows
(temperature 0) use temperature 1. A trainer that scores tokens with the same temperature therefore
recomputes exactly these numbers for unchanged weights.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import torch

__all__ = ["SamplingParams", "GenerationRow", "TokenStep", "RowResult", "generate_rows", "kv_cache_keyword", "left_pad"]


def kv_cache_keyword(model: Any) -> str:
    """The name under which `model.forward` takes and returns its KV cache.

    transformers 5.x renamed `past_key_values` to `cache` (the old name warns and goes away in 5.40);
    asking the signature keeps decoding free of deprecated arguments on either side of the rename.
    A peft wrapper forwards `**kwargs`, so the wrapped model's signature decides.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        parameters = inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


@dataclass(frozen=True)
class SamplingParams:
    """How one completion is sampled; field names and defaults follow the OpenAI request."""

    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: Tuple[str, ...] = ()
    seed: Optional[int] = None
    logprobs: bool = False
    top_logprobs: int = 0
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0 <= self.top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be in [0, 20], got {self.top_logprobs}")


@dataclass
class TokenStep:
    """One sampled token: its id, its logprob, and the most likely alternatives when asked for."""

    token_id: int
    logprob: float
    top_logprobs: List[Tuple[int, float]] = field(default_factory=lambda: [])


@dataclass
class GenerationRow:
    """One sequence to generate. `on_token` sees each sampled token and returns True to stop the row there."""

    prompt_ids: List[int]
    params: SamplingParams
    on_token: Callable[[TokenStep], bool] = lambda _step: False
    generator: Optional[torch.Generator] = None


@dataclass
class RowResult:
    """What one row produced; `finish_reason` is "stop" (eos or stop callback) or "length"."""

    token_ids: List[int]
    logprobs: List[float]
    finish_reason: str


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id lists into `(input_ids, attention_mask)`."""
    import torch

    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        if seq:
            ids[i, width - len(seq) :] = torch.tensor(list(seq), dtype=torch.long)
            mask[i, width - len(seq) :] = 1
    return ids, mask


def _truncate_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask logits outside each row's top-k and top-p (nucleus) set with -inf."""
    import torch

    sorted_logits, sorted_idx = logits.sort(dim=-1, descending=True)
    vocab = logits.shape[-1]
    ranks = torch.arange(vocab, device=logits.device).unsqueeze(0)
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab)).unsqueeze(1)
    drop = ranks >= k
    probs = sorted_logits.softmax(dim=-1)
    drop |= (probs.cumsum(dim=-1) - probs) >= top_p.unsqueeze(1)
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, sorted_idx, sorted_logits)


def generate_rows(
    model: torch.nn.Module,
    rows: Sequence[GenerationRow],
    *,
    pad_token_id: int,
    eos_token_ids: Sequence[int],
) -> List[RowResult]:
    """Generate every row to completion with one shared KV cache; rows may differ in all sampling params."""
    import torch

    device = next(model.parameters()).device
    batch = len(rows)
    input_ids, attention_mask = left_pad([r.prompt_ids for r in rows], pad_token_id)
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)

    temps = torch.tensor([r.params.temperature for r in rows], device=device, dtype=torch.float32)
    greedy = [r.params.temperature == 0 for r in rows]
    scale = torch.where(temps == 0, torch.ones_like(temps), temps).unsqueeze(1)
    top_k = torch.tensor([r.params.top_k for r in rows], device=device, dtype=torch.long)
    top_p = torch.tensor([r.params.top_p for r in rows], device=device, dtype=torch.float32)
    presence = torch.tensor([r.params.presence_penalty for r in rows], device=device).unsqueeze(1)
    frequency = torch.tensor([r.params.frequency_penalty for r in rows], device=device).unsqueeze(1)
    use_penalties = bool((presence != 0).any() or (frequency != 0).any())
    needs_truncation = any(r.params.top_k > 0 or r.params.top_p < 1.0 for r in rows)
    eos = set(eos_token_ids)

    results = [RowResult(token_ids=[], logprobs=[], finish_reason="length") for _ in rows]
    active = [True] * batch
    counts: Optional[torch.Tensor] = None
    past = None
    cache_keyword = kv_cache_keyword(model)
    with torch.inference_mode():
        for _ in range(max(r.params.max_tokens for r in rows)):
            out = model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                **{cache_keyword: past},
            )
            past = getattr(out, cache_keyword)
            logits = out.logits[:, -1, :].float()
            logprobs = torch.log_softmax(logits / scale, dim=-1)
            shaped = logits
            if use_penalties:
                if counts is None:
                    counts = torch.zeros_like(logits)
                shaped = logits - frequency * counts - presence * (counts > 0).float()
            scaled = shaped / scale
            if needs_truncation:
                scaled = _truncate_logits(scaled, top_k, top_p)
            probs = torch.softmax(scaled, dim=-1)
            next_ids = shaped.argmax(dim=-1)
            for i, row in enumerate(rows):
                if active[i] and not greedy[i]:
                    next_ids[i] = torch.multinomial(probs[i], 1, generator=row.generator)[0]
            chosen = logprobs.gather(1, next_ids.unsqueeze(1)).squeeze(1).tolist()
            ids_list = next_ids.tolist()
            for i, row in enumerate(rows):
                if not active[i]:
                    continue
                step = TokenStep(token_id=ids_list[i], logprob=chosen[i])
                if row.params.top_logprobs:
                    values, indices = logprobs[i].topk(row.params.top_logprobs)
                    step.top_logprobs = list(zip(indices.tolist(), values.tolist(), strict=False))
                result = results[i]
                result.token_ids.append(step.token_id)
                result.logprobs.append(step.logprob)
                stop = row.on_token(step)
                if stop or (step.token_id in eos and not row.params.ignore_eos):
                    result.finish_reason, active[i] = "stop", False
                elif len(result.token_ids) >= row.params.max_tokens:
                    active[i] = False
            if not any(active):
                break
            if counts is not None:
                counts.scatter_add_(1, next_ids.unsqueeze(1), torch.ones_like(logits[:, :1]))
            finished = torch.tensor([not a for a in active], device=device)
            input_ids = torch.where(finished, torch.full_like(next_ids, pad_token_id), next_ids).unsqueeze(1)
            attention_mask = torch.cat([attention_mask, torch.ones_like(input_ids)], dim=1)
            position_ids = position_ids[:, -1:] + 1
    return results
