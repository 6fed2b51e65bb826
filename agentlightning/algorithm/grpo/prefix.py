"""Training forward passes that encode a micro-batch's shared prompt prefix once.

The rows of a GRPO micro-batch usually start with the same tokens: the system prompt, few-shot turns, a
group's common prompt. A plain forward pass encodes that prefix once per row. Here it goes through the
model once (batch 1); its KV cache, repeated per row, serves the rest of every row. Logits and gradients
are those of the plain pass up to float rounding (the prefix's activations feed every row, so their
gradients add up the same way), at a fraction of the FLOPs when the prefix is most of each row.

Training goes further (`EncodedPrefix`): the prefix is encoded once with gradients and its KV cache held as
leaf tensors, the rows then go forward and backward a few at a time (each chunk's activations and logits
freed before the next), and the gradients the chunks sent into the cache take one pass back through the
prefix's graph. Same gradients, same FLOPs, and the activations of a chunk instead of the whole micro-batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

if TYPE_CHECKING:
    import torch

__all__ = ["shared_prefix_length", "forward_logits", "pad_left", "EncodedPrefix", "common_prefix", "row_chunks"]


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
    tail = _tail_logits(model, input_ids, attention_mask, shared, cache, cache_keyword, keep_from)
    if keep_from >= shared:
        return tail, width - tail.shape[1]
    return torch.cat([head.logits[:, -1:, :].expand(batch, 1, -1), tail], dim=1), shared - 1


def _tail_logits(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    shared: int,
    cache: Any,
    cache_keyword: str,
    keep_from: int,
) -> torch.Tensor:
    """Logits of positions `max(keep_from, shared)..W-1` of rows whose first `shared` tokens are in `cache`."""
    import torch

    from ...serving.sampling import trailing_logits

    rows, width = input_ids.shape
    positions = torch.arange(shared, width, device=input_ids.device).unsqueeze(0).expand(rows, -1)
    return model(
        input_ids=input_ids[:, shared:],
        attention_mask=attention_mask,
        position_ids=positions,
        use_cache=True,
        **{cache_keyword: cache},
        **trailing_logits(model, width - max(keep_from, shared)),
    ).logits


def _plain(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: Any) -> Tuple[torch.Tensor, int]:
    logits = model(input_ids=input_ids, attention_mask=attention_mask, **keep).logits
    return logits, input_ids.shape[1] - logits.shape[1]


def pad_left(values: torch.Tensor, offset: int) -> torch.Tensor:
    """`[B, W - offset]` per-position values (from `forward_logits`' logits) back to `[B, W]`, zeros first."""
    import torch

    return torch.nn.functional.pad(values, (offset, 0)) if offset else values


def common_prefix(rows: Sequence[Sequence[int]], limit: int) -> int:
    """Tokens every row starts with, at most `limit`."""
    if not rows:
        return 0
    first, count = rows[0], min([limit, *(len(row) for row in rows)])
    for position in range(count):
        token = first[position]
        if any(row[position] != token for row in rows[1:]):
            return position
    return max(0, count)


def row_chunks(lengths: Sequence[int], budget: int) -> List[List[int]]:
    """Consecutive positions of `lengths` in chunks of at most `budget` tokens (a longer row alone); 0: one chunk."""
    if budget <= 0:
        return [list(range(len(lengths)))] if lengths else []
    chunks: List[List[int]] = []
    used = 0
    for position, length in enumerate(lengths):
        if chunks and used + length <= budget:
            chunks[-1].append(position)
            used += length
        else:
            chunks.append([position])
            used = length
    return chunks


class EncodedPrefix:
    """A shared prefix encoded once with gradients; its KV cache serves chunks of rows that each go forward and
    backward on their own, and `backward()` then carries the gradients they left in the cache through the
    prefix's graph (once, after the last chunk).

    Build it with `encode` (None when the model's cache is not a transformers cache of key/value layers: the
    caller then runs each chunk as a plain pass). The prefix never includes a trained token: callers cap it
    below the shortest prompt, so its own logits are never needed.
    """

    def __init__(self, length: int, layers: List[Any], states: List[Dict[str, Any]], pairs: List[Any]) -> None:
        self.length = length
        self._layers = layers
        self._states = states
        self._pairs = pairs  # per layer: (keys, values, key leaf, value leaf)
        self._cache: Any = None

    @classmethod
    def encode(cls, model: Any, prefix_ids: torch.Tensor, cache_keyword: str) -> Optional[EncodedPrefix]:
        """Encode `prefix_ids` (`[1, S]`) with gradients; None when its cache cannot be shared this way."""
        import torch

        from ...serving.sampling import last_logits_only

        mask = torch.ones_like(prefix_ids)
        head = model(input_ids=prefix_ids, attention_mask=mask, use_cache=True, **last_logits_only(model))
        cache = getattr(head, cache_keyword, None)
        layers = list(getattr(cache, "layers", None) or [])
        if not layers or not all(isinstance(getattr(layer, "keys", None), torch.Tensor) for layer in layers):
            return None
        pairs = []
        for layer in layers:
            keys, values = layer.keys, layer.values
            pairs.append((keys, values, keys.detach().requires_grad_(True), values.detach().requires_grad_(True)))
        encoded = cls(int(prefix_ids.shape[1]), layers, [dict(layer.__dict__) for layer in layers], pairs)
        encoded._cache = cache
        return encoded

    def _cache_for(self, rows: int) -> Any:
        """The prefix's cache as a `rows`-row batch over the leaves (each chunk's own cache state)."""
        for layer, state, (_, _, key_leaf, value_leaf) in zip(self._layers, self._states, self._pairs, strict=True):
            layer.__dict__.update(state)
            layer.keys = key_leaf.expand(rows, -1, -1, -1)
            layer.values = value_leaf.expand(rows, -1, -1, -1)
        return self._cache

    def logits(
        self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, cache_keyword: str, keep_from: int
    ) -> Tuple[torch.Tensor, int]:
        """`(logits, offset)` of a chunk of rows that start with the prefix, as `forward_logits` returns them."""
        rows, width = input_ids.shape
        keep_from = min(keep_from, width - 1)
        cache = self._cache_for(rows)
        tail = _tail_logits(model, input_ids, attention_mask, self.length, cache, cache_keyword, keep_from)
        return tail, width - tail.shape[1]

    def backward(self) -> None:
        """Carry the gradients the chunks left in the cache's leaves through the prefix's graph, then let go."""
        import torch

        outputs: List[torch.Tensor] = []
        grads: List[torch.Tensor] = []
        for keys, values, key_leaf, value_leaf in self._pairs:
            for tensor, leaf in ((keys, key_leaf), (values, value_leaf)):
                if leaf.grad is not None and tensor.requires_grad:
                    outputs.append(tensor)
                    grads.append(leaf.grad)
        self.release()
        if outputs:
            torch.autograd.backward(outputs, grads)

    def release(self) -> None:
        """Drop the cache and the prefix's graph (after `backward`, or instead of it)."""
        for layer in self._layers:
            layer.keys = layer.values = None
        self._layers, self._states, self._pairs, self._cache = [], [], [], None
