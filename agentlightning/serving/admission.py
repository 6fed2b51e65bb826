"""Admission: how the engine moves waiting requests into KV-cache slots and prefills them.

Each round admits the requests at the head of the waiting line that fit the free slots, compacts the running
sequences into the low slots first (a smaller decode bucket), and prefills the admitted prompts of each
adapter in passes of at most `max_prefill_tokens` padded tokens. A prompt prefix held in the adapter's
`PrefixCache`, or shared by the prompts admitted together, is encoded once; the choices of a request copy
the first choice's KV. Each choice samples its first token from the prefill logits.

Deterministic mode admits one request at a time (the next waits until the last step of this one has
landed) and seeds a request without a seed from its content and the count of identical requests before it
under these weights (`sampling.content_seed`), instead of drawing seeds in arrival order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import random
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional

from . import sampling as _sampling
from ._detokenizer import IncrementalDetokenizer
from ._prefix_cache import PrefixCache, common_prefix_length
from ._rows import Launched, Row
from .sampling import SlotSampling, TokenStep, row_seed, sample_tokens
from .stream import CompletionStream, Outbox

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

    from .slots import SlotModel

__all__ = ["Admission"]


class Admission:
    """The admission half of `PolicyEngine` (its base): `_admit` runs once per engine step, under the
    weights lock. The engine sets the attributes below and supplies `slot_model`, `prefix_cache_for` and
    `_emit` (which hands out a sampled token)."""

    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    adapters: List[str]
    deterministic: bool
    max_prefill_tokens: int
    batches_run: int
    _rng: random.Random
    _base_seed: int
    _seen: Dict[bytes, int]
    _weights_version: int
    _rows: Dict[int, Row]
    _free: List[int]
    _waiting: Deque[CompletionStream]
    _admitting: List[CompletionStream]
    _launched: Optional[Launched]
    _sampling: Optional[SlotSampling]

    if TYPE_CHECKING:

        @property
        def slot_model(self) -> SlotModel: ...

        def prefix_cache_for(self, adapter: Optional[str] = None) -> Optional[PrefixCache]: ...

        def _emit(self, row: Row, step: TokenStep, outbox: Outbox) -> None: ...

    def _admit(self, outbox: Outbox) -> None:
        admitted = self._admitting
        free = len(self._free)
        if self.deterministic and (self._rows or self._launched is not None):
            free = 0  # one request at a time: the next waits until this one's last step has landed
        while self._waiting and self._waiting[0].n <= free:
            free -= self._waiting[0].n
            admitted.append(self._waiting.popleft())
            if self.deterministic:
                break
        if not admitted:
            return
        self.batches_run += 1
        self._compact()
        for adapter in dict.fromkeys(s.adapter for s in admitted):
            with self._adapter(adapter):
                self._prefill([s for s in admitted if s.adapter == adapter], outbox)
        admitted.clear()

    def _adapter(self, adapter: Optional[str]) -> Any:
        from .adapters import active_adapter

        return active_adapter(self.model, adapter) if self.adapters else contextlib.nullcontext()

    def _prefill(self, streams: List[CompletionStream], outbox: Outbox) -> None:
        import torch

        slots, sampling = self.slot_model, self._sampling
        assert sampling is not None
        cache = self.prefix_cache_for(streams[0].adapter)
        if cache is not None and len(streams) > 1:
            self._encode_shared_prefix(streams, cache)
        owned = [[heapq.heappop(self._free) for _ in range(s.n)] for s in streams]
        starts: List[int] = []
        for stream, stream_slots in zip(streams, owned, strict=True):
            start, block = cache.longest(stream.prompt_ids) if cache is not None else (0, None)
            if block is not None and cache is not None:
                slots.cache.write(stream_slots[0], block, start)
                cache.hits += 1
                cache.reused_tokens += start
            starts.append(start)
        logits = self._prefill_chunks(streams, [s[0] for s in owned], starts)
        rows: List[Row] = []
        for stream, stream_slots in zip(streams, owned, strict=True):
            length = len(stream.prompt_ids)
            if cache is not None and length >= cache.min_tokens and not cache.covered(stream.prompt_ids):
                cache.store(stream.prompt_ids, slots.cache.read(stream_slots[0], length))
            seed = stream.params.seed if stream.params.seed is not None else self._request_seed(stream)
            for index, slot in enumerate(stream_slots):
                if slot != stream_slots[0]:
                    slots.cache.copy(stream_slots[0], slot, length)
                sampling.assign(slot, stream.params, row_seed(seed, index))
                detokenizer = IncrementalDetokenizer(self.tokenizer, stream.params.stop)
                rows.append(Row(stream, index, slot, detokenizer, self._weights_version))
        all_slots = [row.slot for row in rows]
        index = torch.tensor(all_slots, device=slots.device)
        slots.prompt_lengths[index] = torch.tensor([len(r.stream.prompt_ids) for r in rows], device=slots.device)
        slots.positions[index, 0] = slots.prompt_lengths[index]
        per_row = logits.repeat_interleave(torch.tensor([s.n for s in streams], device=logits.device), dim=0)
        next_ids, sampled = sample_tokens(
            per_row, sampling, all_slots, torch.zeros(len(rows), dtype=torch.long, device=slots.device), rows=index
        )
        slots.input_ids[index, 0] = next_ids
        for i, row in enumerate(rows):
            self._rows[row.slot] = row
            self._emit(row, sampled.step(i, row.stream.params.top_logprobs), outbox)

    def _request_seed(self, stream: CompletionStream) -> int:
        """A seed for a request without one: drawn in arrival order, or (deterministic) from its content."""
        if not self.deterministic:
            return self._rng.randrange(2**62)
        params = dataclasses.replace(stream.params, seed=None)
        key = _sampling.content_key(self._weights_version, stream.adapter, stream.n, params, stream.prompt_ids)
        occurrence = self._seen.get(key, 0)
        self._seen[key] = occurrence + 1
        return _sampling.content_seed(key, occurrence, self._base_seed)

    def _encode_shared_prefix(self, streams: List[CompletionStream], cache: PrefixCache) -> None:
        """Store the KV of the prefix the admitted prompts share, encoded once (in a free slot)."""
        prompts = [s.prompt_ids for s in streams]
        shared = min(common_prefix_length(prompts), min(len(p) for p in prompts) - 1)
        prefix = prompts[0][:shared]
        if shared < cache.min_tokens or cache.covered(prefix):
            return
        slot = self._free[0]
        start, block = cache.longest(prompts[0][: shared + 1])
        if block is not None:
            self.slot_model.cache.write(slot, block, start)
        self._prefill_chunks_raw([slot], [prefix[start:]], [start], streams[0].adapter)
        cache.store(prefix, self.slot_model.cache.read(slot, shared))

    def _prefill_chunks(self, streams: List[CompletionStream], slots: List[int], starts: List[int]) -> torch.Tensor:
        tokens = [s.prompt_ids[start:] for s, start in zip(streams, starts, strict=True)]
        return self._prefill_chunks_raw(slots, tokens, starts, streams[0].adapter)

    def _prefill_chunks_raw(
        self, slots: List[int], tokens: List[List[int]], starts: List[int], adapter: Optional[str]
    ) -> torch.Tensor:
        """Prefill in passes of at most `max_prefill_tokens` padded tokens; logits in the given order."""
        import torch

        order = sorted(range(len(tokens)), key=lambda i: len(tokens[i]))  # similar lengths pad less
        outputs: Dict[int, torch.Tensor] = {}
        group: List[int] = []
        for i in order + [-1]:
            width = max([len(tokens[j]) for j in group] + ([len(tokens[i])] if i >= 0 else []))
            if group and (i < 0 or width * (len(group) + 1) > self.max_prefill_tokens):
                logits = self.slot_model.prefill(
                    [slots[j] for j in group], [tokens[j] for j in group], [starts[j] for j in group], key=adapter
                )
                outputs.update({j: logits[k] for k, j in enumerate(group)})
                group = []
            if i >= 0:
                group.append(i)
        return torch.stack([outputs[i] for i in range(len(tokens))])

    def _compact(self) -> None:
        """Move running sequences down into free slots when that shrinks the decoded range's bucket."""
        slots, sampling = self.slot_model, self._sampling
        assert sampling is not None
        if not self._rows:
            return
        target = slots.batch_bucket(len(self._rows))
        if slots.batch_bucket(max(self._rows) + 1) <= target:
            return
        for slot in sorted((s for s in self._rows if s >= target), reverse=True):
            if not self._free or self._free[0] >= target:
                break
            dst = heapq.heappop(self._free)
            row = self._rows.pop(slot)
            slots.move(slot, dst, row.next_position + row.in_flight + 1)
            sampling.move(slot, dst)
            row.slot = dst
            self._rows[dst] = row
            heapq.heappush(self._free, slot)
