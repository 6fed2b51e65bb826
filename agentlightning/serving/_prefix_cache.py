"""KV caches of prompt prefixes, so a batch whose prompts share a prefix (a system prompt, few-shot turns,
or the earlier turns of a conversation that comes back with a longer prompt) skips re-encoding it."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any, List, Optional, Sequence, Tuple


def common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix every sequence starts with."""
    first = sequences[0]
    length = min(len(s) for s in sequences)
    for other in sequences[1:]:
        k = 0
        while k < length and other[k] == first[k]:
            k += 1
        length = k
    return length


class PrefixCache:
    """The KV caches of the `max_entries` most recently used prefixes, valid for one weights version.

    Only prefixes of at least `min_tokens` tokens are stored: shorter ones save less than the copy costs.
    The engine clears the cache whenever the weights change.
    """

    def __init__(self, max_entries: int = 8, min_tokens: int = 16) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.min_tokens = max(1, min_tokens)
        self._entries: OrderedDict[Tuple[int, ...], Any] = OrderedDict()
        self.enabled = True
        """Turned off for a model whose KV cache is not a transformers `Cache` (cannot be copied per batch)."""
        self.hits = 0
        """Batches that reused a stored prefix."""
        self.reused_tokens = 0
        """Prompt tokens (summed over rows) that were not re-encoded thanks to a stored prefix."""

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def longest_shared(self, prompts: Sequence[List[int]]) -> Optional[Tuple[Tuple[int, ...], Any]]:
        """The longest stored prefix that every prompt extends by at least one token, with its cache."""
        room = min(len(p) for p in prompts) - 1
        best: Optional[Tuple[int, ...]] = None
        for key in self._entries:
            if len(key) > room or (best is not None and len(key) <= len(best)):
                continue
            if all(tuple(p[: len(key)]) == key for p in prompts):
                best = key
        if best is None:
            return None
        self._entries.move_to_end(best)
        return best, self._entries[best]

    def store(self, prefix: Sequence[int], cache: Any) -> None:
        key = tuple(prefix)
        self._entries[key] = cache
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    @staticmethod
    def expand(cache: Any, batch: int) -> Any:
        """A private copy of a stored batch-1 cache, repeated `batch` times (decoding appends to it)."""
        copied = copy.deepcopy(cache)
        copied.batch_repeat_interleave(batch)
        return copied
