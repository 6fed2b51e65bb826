"""Training forward passes that encode a micro-batch's shared prompt prefix once.

The rows of a GRPO micro-batch usually start with the same tokens: the system prompt, few-shot turns, a
group's common prompt. A plain forward pass encodes that prefix once per row. Here it goes through the
model once (batch 1); its KV cache, repeated per row, serves the rest of every row. Logits and gradients
are those of the plain pass up to float rounding (the prefix's activations feed every row, so their
gradients add up the same way), at a fraction of the FLOPs when the prefix is most of each row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Tuple

if TYPE_CHECKING:
    import torch

__all__ = ["shared_prefix_length", "forward_logits", "pad_left"]


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """Tokens every row of a right-padded batch starts with, leaving each row at least one more token."""
    if input_ids.shape[0] == 0:
        return 0
    same = (input_ids == input_ids[:1]).all(dim=0).long()
    shared = int(same.cumprod(dim=0).sum().item())
    shortest = int(attention_mask.sum(dim=1).min().item())
    return max(0, min(shared, shortest - 1))


def forward_logits(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_shared: int,
    min_shared_tokens: int,
    cache_keyword: str,
    keep_from: int = 0,
) -> Tuple[torch.Tensor, int]:
    """`(logits, offset)`: the logits of positions `offset..W-1` of a right-padded batch (`[B, W - offset, V]`).

    `offset <= keep_from`: the positions before `keep_from` are not needed (the first response token of any
    row is at `keep_from + 1` or later), so they are not projected onto the vocabulary where the model can
    skip them (`logits_to_keep`); that projection and the logits' memory grow with the vocabulary.

    When the rows share a prefix of at least `min_shared_tokens` tokens (counting at most `max_shared`: the
    shortest prompt, so no response token is ever inside it), the prefix is encoded once; earlier positions
    only predict prompt tokens, which are never trained. Otherwise, or for a model whose cache cannot be
    repeated per row (not a transformers `Cache`), this is the plain forward pass.
    """
    import torch

    from ...serving.sampling import last_logits_only, trailing_logits

    batch, width = input_ids.shape
    keep_from = max(0, min(keep_from, width - 1))
    shared = 0
    if batch > 1 and min_shared_tokens > 0:
        shared = min(shared_prefix_length(input_ids, attention_mask), max_shared)
    if shared < max(1, min_shared_tokens):
        return _plain(model, input_ids, attention_mask, trailing_logits(model, width - keep_from))
    head = model(
        input_ids=input_ids[:1, :shared],
        attention_mask=attention_mask[:1, :shared],
        use_cache=True,
        **last_logits_only(model),
    )
    cache = getattr(head, cache_keyword, None)
    if not hasattr(cache, "batch_repeat_interleave"):
        return _plain(model, input_ids, attention_mask, trailing_logits(model, width - keep_from))
    cache.batch_repeat_interleave(batch)  # type: ignore[union-attr]  # repeat_interleave: differentiable
    positions = torch.arange(shared, width, device=input_ids.device).unsqueeze(0).expand(batch, -1)
    tail = model(
        input_ids=input_ids[:, shared:],
        attention_mask=attention_mask,
        position_ids=positions,
        use_cache=True,
        **{cache_keyword: cache},
        **trailing_logits(model, width - max(keep_from, shared)),
    ).logits
    if keep_from >= shared:
        return tail, width - tail.shape[1]
    return torch.cat([head.logits[:, -1:, :].expand(batch, 1, -1), tail], dim=1), shared - 1


def _plain(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: Any) -> Tuple[torch.Tensor, int]:
    logits = model(input_ids=input_ids, attention_mask=attention_mask, **keep).logits
    return logits, input_ids.shape[1] - logits.shape[1]


def pad_left(values: torch.Tensor, offset: int) -> torch.Tensor:
    """`[B, W - offset]` per-position values (from `forward_logits`' logits) back to `[B, W]`, zeros first."""
    import torch

    return torch.nn.functional.pad(values, (offset, 0)) if offset else values
