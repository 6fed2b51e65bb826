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

from ._prefix_cache import PrefixCache, common_prefix_length

if TYPE_CHECKING:
    import torch

__all__ = [
    "SamplingParams",
    "GenerationRow",
    "TokenStep",
    "RowResult",
    "generate_rows",
    "kv_cache_keyword",
    "last_logits_only",
    "left_pad",
]


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


def last_logits_only(model: Any) -> dict[str, int]:
    """`logits_to_keep=1` where `model.forward` takes it: the vocabulary projection of the prompt's other
    positions is never used (it is about a fifth of the prefill's work for SmolLM2)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        parameters = inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return {}
    return {"logits_to_keep": 1} if "logits_to_keep" in parameters else {}


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


def _sample(probs: torch.Tensor, rows: Sequence[GenerationRow], sampled: List[int]) -> torch.Tensor:
    """One token per row in `sampled`, by inverse CDF: each row draws one uniform number from its own generator.

    A row's draw depends only on its generator and its own probabilities, so it samples the same token
    whether it is decoded alone or in a batch; the batch needs one cumsum and one search, not a
    `multinomial` per row.
    """
    import torch

    index = torch.tensor(sampled, device=probs.device)
    uniforms = torch.cat(
        [torch.rand(1, generator=rows[i].generator, device=probs.device, dtype=torch.float64) for i in sampled]
    )
    cdf = probs.index_select(0, index).double().cumsum(dim=-1)
    # The total can differ from 1 by rounding: scale the draw, and never pick a zero-probability tail token.
    picked = torch.searchsorted(cdf, (uniforms * cdf[:, -1]).unsqueeze(1), right=True).squeeze(1)
    return picked.clamp(max=probs.shape[-1] - 1)


def _encode_shared_prefix(
    model: torch.nn.Module, prompts: Sequence[List[int]], prefix_cache: PrefixCache, cache_keyword: str
) -> Tuple[int, Any]:
    """Length of the prompts' shared prefix and its KV cache for the batch, from `prefix_cache` when stored.

    A stored prefix shorter than what the prompts share by `min_tokens` or more is extended (only the new
    tokens go through the model) and the longer one is stored too: a conversation that comes back with
    its earlier turns, a reply and a tool result re-encodes only what is new since its last request.
    """
    import torch

    if not prefix_cache.enabled:
        return 0, None
    shared = min(common_prefix_length(prompts), min(len(p) for p in prompts) - 1)
    hit = prefix_cache.longest_shared(prompts)
    start, cache = (0, None) if hit is None else (len(hit[0]), hit[1])
    if shared - start >= prefix_cache.min_tokens:
        device = next(model.parameters()).device
        ids = torch.tensor([prompts[0][start:shared]], dtype=torch.long, device=device)
        past = PrefixCache.expand(cache, 1) if cache is not None else None
        out = model(
            input_ids=ids,
            attention_mask=torch.ones((1, shared), dtype=torch.long, device=device),
            position_ids=torch.arange(start, shared, device=device).unsqueeze(0),
            use_cache=True,
            **{cache_keyword: past},
            **last_logits_only(model),
        )
        cache = getattr(out, cache_keyword, None)
        if not hasattr(cache, "batch_repeat_interleave"):  # not a transformers Cache: run without reuse
            prefix_cache.enabled = False
            return 0, None
        prefix_cache.store(prompts[0][:shared], cache)
    if cache is None:
        return 0, None
    if start:
        prefix_cache.hits += 1
        prefix_cache.reused_tokens += start * len(prompts)
    length = max(start, shared) if shared - start >= prefix_cache.min_tokens else start
    return length, PrefixCache.expand(cache, len(prompts))


def generate_rows(
    model: torch.nn.Module,
    rows: Sequence[GenerationRow],
    *,
    pad_token_id: int,
    eos_token_ids: Sequence[int],
    prefix_cache: Optional[PrefixCache] = None,
) -> List[RowResult]:
    """Generate every row to completion with one shared KV cache; rows may differ in all sampling params.

    With a `prefix_cache`, the prompts' shared prefix is encoded once (or not at all when a stored one
    fits) and only the rest of each prompt goes through the model; the cache must belong to the
    model's current weights.
    """
    import torch

    device = next(model.parameters()).device
    batch = len(rows)
    prompts = [list(r.prompt_ids) for r in rows]
    cache_keyword = kv_cache_keyword(model)
    with torch.inference_mode():
        prefix_len, past = 0, None
        if prefix_cache is not None:
            prefix_len, past = _encode_shared_prefix(model, prompts, prefix_cache, cache_keyword)
        input_ids, attention_mask = left_pad([p[prefix_len:] for p in prompts], pad_token_id)
        if prefix_len:  # [shared prefix][padding][rest of the prompt]: the mask hides the padding in the middle
            attention_mask = torch.cat([torch.ones((batch, prefix_len), dtype=torch.long), attention_mask], dim=1)
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)[:, prefix_len:]
        return _decode(
            model, rows, input_ids, attention_mask, position_ids, past, cache_keyword, pad_token_id, eos_token_ids
        )


def _decode(
    model: torch.nn.Module,
    rows: Sequence[GenerationRow],
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    past: Any,
    cache_keyword: str,
    pad_token_id: int,
    eos_token_ids: Sequence[int],
) -> List[RowResult]:
    import torch

    device = input_ids.device
    batch = len(rows)
    temps = torch.tensor([r.params.temperature for r in rows], device=device, dtype=torch.float32)
    greedy = [r.params.temperature == 0 for r in rows]
    scale = torch.where(temps == 0, torch.ones_like(temps), temps).unsqueeze(1)
    top_k = torch.tensor([r.params.top_k for r in rows], device=device, dtype=torch.long)
    top_p = torch.tensor([r.params.top_p for r in rows], device=device, dtype=torch.float32)
    presence = torch.tensor([r.params.presence_penalty for r in rows], device=device).unsqueeze(1)
    frequency = torch.tensor([r.params.frequency_penalty for r in rows], device=device).unsqueeze(1)
    use_penalties = any(r.params.presence_penalty != 0 or r.params.frequency_penalty != 0 for r in rows)
    needs_truncation = any(r.params.top_k > 0 or r.params.top_p < 1.0 for r in rows)
    wants_top = any(r.params.top_logprobs for r in rows)
    eos = set(eos_token_ids)
    pad = torch.full((batch,), pad_token_id, dtype=torch.long, device=device)

    results = [RowResult(token_ids=[], logprobs=[], finish_reason="length") for _ in rows]
    active = [True] * batch
    counts: Optional[torch.Tensor] = None
    last_only = last_logits_only(model)
    for _ in range(max(r.params.max_tokens for r in rows)):
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=True,
            **{cache_keyword: past},
            **last_only,
        )
        past = getattr(out, cache_keyword)
        logits = out.logits[:, -1, :].float()
        logprobs = torch.log_softmax(logits / scale, dim=-1)
        shaped = logits
        if use_penalties:
            seen = counts if counts is not None else torch.zeros_like(logits)
            counts = seen
            shaped = logits - frequency * seen - presence * (seen > 0).float()
        next_ids = shaped.argmax(dim=-1)
        sampled = [i for i in range(batch) if active[i] and not greedy[i]]
        if sampled:
            scaled = shaped / scale
            if needs_truncation:
                scaled = _truncate_logits(scaled, top_k, top_p)
            next_ids[sampled] = _sample(torch.softmax(scaled, dim=-1), rows, sampled)
        chosen_t = logprobs.gather(1, next_ids.unsqueeze(1)).squeeze(1)
        # One device-to-host copy per step for ids and logprobs together.
        ids_list, chosen = next_ids.tolist(), chosen_t.tolist()
        tops: Optional[Tuple[List[List[float]], List[List[int]]]] = None
        if wants_top:
            width = max(r.params.top_logprobs for r in rows)
            values, indices = logprobs.topk(width, dim=-1)
            tops = (values.tolist(), indices.tolist())
        for i, row in enumerate(rows):
            if not active[i]:
                continue
            step = TokenStep(token_id=ids_list[i], logprob=chosen[i])
            if row.params.top_logprobs and tops is not None:
                k = row.params.top_logprobs
                step.top_logprobs = list(zip(tops[1][i][:k], tops[0][i][:k], strict=False))
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
        if all(active):
            input_ids = next_ids.unsqueeze(1)
        else:
            finished = torch.tensor([not a for a in active], device=device)
            input_ids = torch.where(finished, pad, next_ids).unsqueeze(1)
        attention_mask = torch.cat([attention_mask, torch.ones_like(input_ids)], dim=1)
        position_ids = position_ids[:, -1:] + 1
    return results
